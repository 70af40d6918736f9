"""Bounded per-GPU ring buffers: the daemon's telemetry memory, flat with uptime.

Each GPU keeps its last `capacity` samples in preallocated numpy arrays (one
timestamp array, one value array per metric the GPU has reported); the
oldest sample is overwritten. `recording(start_s, end_s)` copies a time
window out as a `Recording` for the detector, so the analysis never holds a
reference into arrays the sampler is still writing.

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
K = TypeVar("K")


def capacity_for(history_s: float, interval_s: float, *, slack_ratio: float = 0.25) -> int:
    """Samples needed to hold `history_s` at one sample per `interval_s`, with slack for bursts."""
    if not (history_s > 0 and interval_s > 0):
        raise ValueError(f"history and interval must be > 0, got {history_s!r}, {interval_s!r}")
    return max(2, math.ceil(history_s / interval_s * (1.0 + slack_ratio)))


class _Ring(Generic[K]):
    """One series: timestamps plus one value row per key (metric), all `capacity` long."""

    __slots__ = ("capacity", "count", "head", "t_s", "values")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.t_s: FloatArray = np.empty(capacity)
        self.values: dict[K, FloatArray] = {}
        self.head = 0  # next slot to write
        self.count = 0

    def append(self, t_s: float, values: Mapping[K, float]) -> None:
        i = self.head
        self.t_s[i] = t_s
        for m, row in self.values.items():
            row[i] = values.get(m, np.nan)
        if not values.keys() <= self.values.keys():
            for m in values.keys() - self.values.keys():
                # First time this GPU reports `m`: earlier slots read as missing (NaN).
                row = np.full(self.capacity, np.nan)
                row[i] = values[m]
                self.values[m] = row
        self.head = (i + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

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
        return t[lo:hi].copy(), {m: row[sel] for m, row in self.values.items()}

    def last_t(self) -> float | None:
        return None if self.count == 0 else float(self.t_s[(self.head - 1) % self.capacity])

    def resized(self, capacity: int) -> _Ring[K]:
        out: _Ring[K] = _Ring(capacity)
        idx = self._order()[-capacity:]
        n = idx.size
        out.t_s[:n] = self.t_s[idx]
        for m, row in self.values.items():
            new = np.full(capacity, np.nan)
            new[:n] = row[idx]
            out.values[m] = new
        out.head, out.count = n % capacity, n
        return out

    @property
    def nbytes(self) -> int:
        return int(self.t_s.nbytes + sum(r.nbytes for r in self.values.values()))


@dataclass(frozen=True)
class RingStats:
    gpus: int
    capacity: int
    samples: int
    nbytes: int


class RingBuffer:
    """Per-GPU rings of `capacity` samples, plus one ring of engine load."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"ring capacity must be >= 2 samples, got {capacity}")
        self._capacity = capacity
        self._lock = threading.Lock()
        self._gpus: dict[int, GpuInfo] = {}
        self._rings: dict[int, _Ring[Metric]] = {}
        self._load: _Ring[str] = _Ring(capacity)

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_gpus(self, gpus: Iterable[GpuInfo]) -> None:
        """Record GPU identities (a GPU that samples before this gets a bare GpuInfo)."""
        with self._lock:
            for g in gpus:
                self._gpus[g.index] = g

    def add(self, samples: Iterable[Sample]) -> int:
        """Append samples (each GPU's in time order); returns how many were added."""
        n = 0
        with self._lock:
            for s in samples:
                ring = self._rings.get(s.gpu)
                if ring is None:
                    ring = self._rings[s.gpu] = _Ring(self._capacity)
                    self._gpus.setdefault(s.gpu, GpuInfo(index=s.gpu))
                ring.append(s.t_s, s.values)
                n += 1
        return n

    def add_load(self, load: LoadSample) -> None:
        nan = float("nan")
        vals = {
            "running": nan if load.running is None else load.running,
            "queued": nan if load.queued is None else load.queued,
        }
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
        return LoadSample(
            t,
            None if math.isnan(running) else running,
            None if math.isnan(queued) else queued,
        )

    def resize(self, capacity: int) -> None:
        """Change the capacity, keeping the newest samples (on a config reload)."""
        if capacity < 2:
            raise ValueError(f"ring capacity must be >= 2 samples, got {capacity}")
        with self._lock:
            if capacity == self._capacity:
                return
            self._rings = {g: r.resized(capacity) for g, r in self._rings.items()}
            self._load = self._load.resized(capacity)
            self._capacity = capacity

    def last_t(self) -> float | None:
        """Timestamp of the newest GPU sample, or None when empty."""
        with self._lock:
            ts = [t for r in self._rings.values() if (t := r.last_t()) is not None]
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
            for g, ring in sorted(self._rings.items()):
                if wanted is not None and g not in wanted:
                    continue
                t, vals = ring.window(start_s, end_s)
                series[g] = GpuSeries(g, t, vals)
            infos = tuple(
                self._gpus[g] for g in sorted(self._gpus) if wanted is None or g in wanted
            )
            lt, lv = self._load.window(start_s, end_s)
        nan = np.full(lt.shape, np.nan)
        load = LoadSeries(lt, lv.get("running", nan), lv.get("queued", nan.copy()))
        return Recording(gpus=infos, series=series, topology=topology, load=load)

    def last(self, seconds: float, *, topology: Topology | None = None) -> Recording:
        """The trailing `seconds` before (and including) the newest sample."""
        end = self.last_t()
        if end is None:
            return Recording(gpus=(), series={}, topology=topology)
        return self.recording(end - seconds, float(np.nextafter(end, np.inf)), topology=topology)

    def stats(self) -> RingStats:
        with self._lock:
            return RingStats(
                gpus=len(self._rings),
                capacity=self._capacity,
                samples=sum(r.count for r in self._rings.values()),
                nbytes=sum(r.nbytes for r in self._rings.values()) + self._load.nbytes,
            )
