"""Bounded per-GPU ring buffers: the daemon's telemetry memory, flat with uptime.

Each GPU keeps its last `capacity` polled samples in preallocated numpy arrays
(one timestamp array, one value array per metric the GPU has reported); the
oldest sample is overwritten. Rows from the driver's sample buffers
(`Sample.origin == "buffer"`) come at the driver's rate, not one per poll, so
they go into a second ring per GPU with its own capacity: were they to share
the poll ring, they would crowd the configured history out of it. The buffer
ring holds the analysis window at up to `BUFFER_MAX_RATE_HZ` rows per second
(a faster driver's rows are merged into the previous row, see `add`), and
has arrays only for the metrics those rows carry (instant power, kernel busy).

`recording(start_s, end_s)` copies a time window out of both rings, merged by
time, as a `Recording` for the detector, so the analysis never holds a
reference into arrays the sampler is still writing.

Metric rows are float32 (half the memory: 64 GPUs at 10 Hz with 10 minutes
of history hold 49 MB in float64), which keeps 7 significant digits: more
than NVML gives for power, clocks, temperature and ratios, and exact for
memory in whole MiB. The energy counter (millions of joules, read as
differences of a few joules) and the clock event reasons (a 64-bit mask)
stay float64, as do the time axis and the engine load. Windows are copied
out as float64.

Writers (the sampling thread) and readers (analysis, the exporter) may run
concurrently: one lock guards the buffers; copies are O(window).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, LoadSeries, Recording
from bubblewatch.model.samples import LoadSample, Sample
from bubblewatch.model.topology import Topology

FloatArray = npt.NDArray[np.float64]
Row = npt.NDArray[np.float32] | npt.NDArray[np.float64]
K = TypeVar("K")

# Metrics whose rows stay float64 (see the module docstring); the others are float32.
WIDE_METRICS: frozenset[object] = frozenset({Metric.ENERGY_J, Metric.CLOCKS_EVENT_REASONS})


# The fastest rate of driver-buffered rows kept per GPU. The fake NVML gives
# 14 rows/s (power every 100 ms, utilisation every 1/6 s); NVML documents no
# rate, so this leaves room for drivers several times faster. Rows closer than
# 1 / BUFFER_MAX_RATE_HZ to the previous buffered row are merged into it.
BUFFER_MAX_RATE_HZ = 50.0


def capacity_for(history_s: float, interval_s: float, *, slack_ratio: float = 0.25) -> int:
    """Samples needed to hold `history_s` at one sample per `interval_s`, with slack for bursts."""
    if not (history_s > 0 and interval_s > 0):
        raise ValueError(f"history and interval must be > 0, got {history_s!r}, {interval_s!r}")
    return max(2, math.ceil(history_s / interval_s * (1.0 + slack_ratio)))


def buffer_capacity_for(
    window_s: float, *, max_rate_hz: float = BUFFER_MAX_RATE_HZ, slack_ratio: float = 0.25
) -> int:
    """Buffered rows to hold an analysis window of `window_s` at `max_rate_hz`, with slack."""
    return capacity_for(window_s, 1.0 / max_rate_hz, slack_ratio=slack_ratio)


class _Ring(Generic[K]):
    """One series: timestamps plus one value row per key (metric), all `capacity` long."""

    __slots__ = ("capacity", "count", "head", "narrow", "t_s", "values")

    def __init__(self, capacity: int, *, narrow: bool = False) -> None:
        self.capacity = capacity
        self.narrow = narrow  # metric rows float32 except WIDE_METRICS
        self.t_s: FloatArray = np.empty(capacity)
        self.values: dict[K, Row] = {}
        self.head = 0  # next slot to write
        self.count = 0

    def _row(self, key: K) -> Row:
        """A new row for `key`, every slot missing (NaN)."""
        narrow = self.narrow and key not in WIDE_METRICS
        return np.full(self.capacity, np.nan, dtype=np.float32 if narrow else np.float64)

    def append(self, t_s: float, values: Mapping[K, float]) -> None:
        i = self.head
        self.t_s[i] = t_s
        for m, row in self.values.items():
            row[i] = values.get(m, np.nan)
        if not values.keys() <= self.values.keys():
            for m in values.keys() - self.values.keys():
                # First time this GPU reports `m`: earlier slots read as missing (NaN).
                row = self._row(m)
                row[i] = values[m]
                self.values[m] = row
        self.head = (i + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def merge_last(self, values: Mapping[K, float]) -> None:
        """Fill the newest slot's missing (NaN) values from `values`; keep what it has."""
        i = (self.head - 1) % self.capacity
        for m, v in values.items():
            row = self.values.get(m)
            if row is None:
                row = self.values[m] = self._row(m)
            if math.isnan(row[i]):
                row[i] = v

    def _order(self) -> npt.NDArray[np.intp]:
        """Slot indices from oldest to newest."""
        start = (self.head - self.count) % self.capacity
        return (start + np.arange(self.count)) % self.capacity

    def window(self, start_s: float, end_s: float) -> tuple[FloatArray, dict[K, FloatArray]]:
        idx = self._order()
        t = self.t_s[idx]
        if t.size > 1 and bool(np.any(np.diff(t) < 0)):
            # Buffered driver samples can arrive older than the last reading.
            idx = idx[np.argsort(t, kind="stable")]
            t = self.t_s[idx]
        lo, hi = np.searchsorted(t, [start_s, end_s], side="left")
        sel = idx[lo:hi]
        return t[lo:hi].copy(), {m: row[sel].astype(np.float64) for m, row in self.values.items()}

    def last_t(self) -> float | None:
        return None if self.count == 0 else float(self.t_s[(self.head - 1) % self.capacity])

    def resized(self, capacity: int) -> _Ring[K]:
        out: _Ring[K] = _Ring(capacity, narrow=self.narrow)
        idx = self._order()[-capacity:]
        n = idx.size
        out.t_s[:n] = self.t_s[idx]
        for m, row in self.values.items():
            new = out._row(m)
            new[:n] = row[idx]
            out.values[m] = new
        out.head, out.count = n % capacity, n
        return out

    @property
    def nbytes(self) -> int:
        return int(self.t_s.nbytes + sum(r.nbytes for r in self.values.values()))


def _merged(
    a: tuple[FloatArray, dict[K, FloatArray]], b: tuple[FloatArray, dict[K, FloatArray]]
) -> tuple[FloatArray, dict[K, FloatArray]]:
    """Two windows' rows in one time order; a metric one side lacks is NaN on that side."""
    (ta, va), (tb, vb) = a, b
    if tb.size == 0 and not vb.keys() - va.keys():
        return a
    t = np.concatenate([ta, tb])
    order = np.argsort(t, kind="stable")
    keys = [*va, *(m for m in vb if m not in va)]
    out: dict[K, FloatArray] = {}
    for m in keys:
        x = va.get(m)
        y = vb.get(m)
        col = np.concatenate(
            [
                np.full(ta.shape, np.nan) if x is None else x,
                np.full(tb.shape, np.nan) if y is None else y,
            ]
        )
        out[m] = col[order]
    return t[order], out


@dataclass(frozen=True)
class RingStats:
    gpus: int
    capacity: int
    samples: int
    nbytes: int
    buffer_capacity: int = 0
    buffer_samples: int = 0
    buffer_merged: int = 0  # buffered rows merged into the previous one (faster than the cap)


class RingBuffer:
    """Per-GPU rings of `capacity` polled samples and `buffer_capacity` buffered rows, plus load.

    `buffer_capacity` defaults to `capacity`; the daemon sizes it with
    `buffer_capacity_for(analysis window)`. Buffered rows less than
    `1 / buffer_max_rate_hz` after the previous buffered row of their GPU
    are merged into it, so the buffer ring spans at least
    `buffer_capacity / buffer_max_rate_hz` seconds whatever the driver's rate.
    """

    def __init__(
        self,
        capacity: int,
        *,
        buffer_capacity: int | None = None,
        buffer_max_rate_hz: float = BUFFER_MAX_RATE_HZ,
    ) -> None:
        buffer_capacity = capacity if buffer_capacity is None else buffer_capacity
        _check_capacity(capacity, buffer_capacity)
        if not buffer_max_rate_hz > 0:
            raise ValueError(f"buffer_max_rate_hz must be > 0, got {buffer_max_rate_hz!r}")
        self._capacity = capacity
        self._buffer_capacity = buffer_capacity
        self._buffer_gap_s = 1.0 / buffer_max_rate_hz
        self._lock = threading.Lock()
        self._gpus: dict[int, GpuInfo] = {}
        self._rings: dict[int, _Ring[Metric]] = {}
        self._buffered: dict[int, _Ring[Metric]] = {}
        self._buffer_merged = 0
        self._load: _Ring[str] = _Ring(capacity)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def buffer_capacity(self) -> int:
        return self._buffer_capacity

    def set_gpus(self, gpus: Iterable[GpuInfo]) -> None:
        """Record GPU identities (a GPU that samples before this gets a bare GpuInfo)."""
        with self._lock:
            for g in gpus:
                self._gpus[g.index] = g

    def add(self, samples: Iterable[Sample]) -> int:
        """Append samples (each GPU's in time order); returns how many were added.

        Polled rows go to the GPU's poll ring, buffered rows to its buffer
        ring (merged into the previous buffered row when closer than the
        rate cap allows; a merged row still counts as added).
        """
        n = 0
        with self._lock:
            for s in samples:
                buffered = s.origin == "buffer"
                rings = self._buffered if buffered else self._rings
                ring = rings.get(s.gpu)
                if ring is None:
                    cap = self._buffer_capacity if buffered else self._capacity
                    ring = rings[s.gpu] = _Ring(cap, narrow=True)
                    self._gpus.setdefault(s.gpu, GpuInfo(index=s.gpu))
                last = ring.last_t()
                if buffered and last is not None and 0.0 <= s.t_s - last < self._buffer_gap_s:
                    ring.merge_last(s.values)
                    self._buffer_merged += 1
                else:
                    ring.append(s.t_s, s.values)
                n += 1
        return n

    def add_load(self, load: LoadSample) -> None:
        nan = float("nan")
        vals = {
            "running": nan if load.running is None else load.running,
            "queued": nan if load.queued is None else load.queued,
        }
        if load.micro_batch is not None:
            vals["micro_batch"] = load.micro_batch
        with self._lock:
            self._load.append(load.t_s, vals)

    def last_load(self) -> LoadSample | None:
        """The newest engine-load sample, or None when there is none."""
        with self._lock:
            ring = self._load
            if ring.count == 0:
                return None
            i = (ring.head - 1) % ring.capacity
            t = float(ring.t_s[i])
            running = float(ring.values["running"][i])
            queued = float(ring.values["queued"][i])
            micro = ring.values.get("micro_batch")
            mb = float("nan") if micro is None else float(micro[i])
        return LoadSample(
            t,
            None if math.isnan(running) else running,
            None if math.isnan(queued) else queued,
            None if math.isnan(mb) else mb,
        )

    def resize(self, capacity: int, buffer_capacity: int | None = None) -> None:
        """Change the capacities, keeping the newest samples (on a config reload).

        `buffer_capacity` None keeps the buffer rings' capacity as it is.
        """
        buffer_capacity = self._buffer_capacity if buffer_capacity is None else buffer_capacity
        _check_capacity(capacity, buffer_capacity)
        with self._lock:
            if capacity != self._capacity:
                self._rings = {g: r.resized(capacity) for g, r in self._rings.items()}
                self._load = self._load.resized(capacity)
                self._capacity = capacity
            if buffer_capacity != self._buffer_capacity:
                self._buffered = {g: r.resized(buffer_capacity) for g, r in self._buffered.items()}
                self._buffer_capacity = buffer_capacity

    def last_t(self) -> float | None:
        """Timestamp of the newest GPU sample, or None when empty."""
        with self._lock:
            rings = (*self._rings.values(), *self._buffered.values())
            ts = [t for r in rings if (t := r.last_t()) is not None]
        return max(ts) if ts else None

    def recording(
        self,
        start_s: float,
        end_s: float,
        *,
        topology: Topology | None = None,
        gpus: Iterable[int] | None = None,
    ) -> Recording:
        """A copy of the samples with start_s <= t < end_s (of `gpus`, default all)."""
        wanted = None if gpus is None else set(gpus)
        with self._lock:
            series = {}
            for g in sorted(self._rings.keys() | self._buffered.keys()):
                if wanted is not None and g not in wanted:
                    continue
                polled, buffered = self._rings.get(g), self._buffered.get(g)
                empty: tuple[FloatArray, dict[Metric, FloatArray]] = (np.zeros(0), {})
                t, vals = _merged(
                    empty if polled is None else polled.window(start_s, end_s),
                    empty if buffered is None else buffered.window(start_s, end_s),
                )
                series[g] = GpuSeries(g, t, vals)
            infos = tuple(
                self._gpus[g] for g in sorted(self._gpus) if wanted is None or g in wanted
            )
            lt, lv = self._load.window(start_s, end_s)
        nan = np.full(lt.shape, np.nan)
        micro = lv.get("micro_batch")
        if micro is not None and not bool(np.isfinite(micro).any()):
            micro = None
        load = LoadSeries(lt, lv.get("running", nan), lv.get("queued", nan.copy()), micro)
        return Recording(gpus=infos, series=series, topology=topology, load=load)

    def last(self, seconds: float, *, topology: Topology | None = None) -> Recording:
        """The trailing `seconds` before (and including) the newest sample."""
        end = self.last_t()
        if end is None:
            return Recording(gpus=(), series={}, topology=topology)
        return self.recording(end - seconds, float(np.nextafter(end, np.inf)), topology=topology)

    def stats(self) -> RingStats:
        with self._lock:
            gpu_rings = (*self._rings.values(), *self._buffered.values())
            return RingStats(
                gpus=len(self._rings.keys() | self._buffered.keys()),
                capacity=self._capacity,
                samples=sum(r.count for r in self._rings.values()),
                nbytes=sum(r.nbytes for r in gpu_rings) + self._load.nbytes,
                buffer_capacity=self._buffer_capacity,
                buffer_samples=sum(r.count for r in self._buffered.values()),
                buffer_merged=self._buffer_merged,
            )


def _check_capacity(capacity: int, buffer_capacity: int) -> None:
    if capacity < 2:
        raise ValueError(f"ring capacity must be >= 2 samples, got {capacity}")
    if buffer_capacity < 2:
        raise ValueError(f"buffer ring capacity must be >= 2 rows, got {buffer_capacity}")
