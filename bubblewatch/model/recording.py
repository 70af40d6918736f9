"""Columnar telemetry: per-GPU numpy arrays with windowed access for analysis.

A `Recording` is what every source produces (trace replay, importers, the
simulator, the live sampler's ring buffer) and what the detector reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.model.column_parts import Part, merge_parts, share_equal
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's samples: sorted timestamps and, per reported metric, a value array.

    A metric the GPU never reported is not in `values`. A sample that lacked a
    metric the GPU otherwise reports holds NaN there.
    """

    gpu: int
    t_s: FloatArray
    values: Mapping[Metric, FloatArray]

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    def has(self, metric: Metric) -> bool:
        arr = self.values.get(metric)
        return arr is not None and bool(np.isfinite(arr).any())

    def get(self, metric: Metric) -> FloatArray | None:
        """The metric's values, or None when the GPU does not report it."""
        return self.values.get(metric) if self.has(metric) else None

    def window(self, start_s: float, end_s: float) -> GpuSeries:
        """Samples with start_s <= t < end_s."""
        lo, hi = np.searchsorted(self.t_s, [start_s, end_s], side="left")
        return GpuSeries(self.gpu, self.t_s[lo:hi], {m: v[lo:hi] for m, v in self.values.items()})


@dataclass(frozen=True)
class LoadSeries:
    """Engine load over time; NaN where unknown.

    `micro_batch` holds the requests in one micro-batch where the engine's gauge
    counts one (SGLang with pipeline parallelism; `running` is then a lower
    bound), NaN at readings that count all running requests; None when no
    reading counts one micro-batch.
    """

    t_s: FloatArray
    running: FloatArray
    queued: FloatArray
    micro_batch: FloatArray | None = None

    @classmethod
    def empty(cls) -> LoadSeries:
        z = np.zeros(0)
        return cls(z, z.copy(), z.copy())

    @classmethod
    def from_samples(cls, rows: Iterable[LoadSample]) -> LoadSeries:
        """Readings as columns (None becomes NaN)."""
        rows = list(rows)
        if not rows:
            return cls.empty()

        def column(values: Iterable[float | None]) -> FloatArray:
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)

        micro = column(r.micro_batch for r in rows)
        return cls(
            np.array([r.t_s for r in rows], dtype=np.float64),
            column(r.running for r in rows),
            column(r.queued for r in rows),
            micro if bool(np.isfinite(micro).any()) else None,
        )

    @classmethod
    def concat(cls, loads: Iterable[LoadSeries]) -> LoadSeries:
        """Series end to end, in time order (stable for readings of the same instant)."""
        parts = [x for x in loads if len(x)]
        if not parts:
            return cls.empty()
        t = np.concatenate([x.t_s for x in parts])
        if len(parts) == 1 and not bool((t[1:] < t[:-1]).any()):
            return parts[0]
        order = np.argsort(t, kind="stable")
        micro = None
        if any(x.micro_batch is not None for x in parts):
            micro = np.concatenate([x.micro_batch_or_nan() for x in parts])[order]
        return cls(
            t[order],
            np.concatenate([x.running for x in parts])[order],
            np.concatenate([x.queued for x in parts])[order],
            micro,
        )

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    def micro_batch_or_nan(self) -> FloatArray:
        """`micro_batch`, NaN throughout when no reading counts one micro-batch."""
        if self.micro_batch is not None:
            return self.micro_batch
        return np.full(len(self), np.nan)

    def window(self, start_s: float, end_s: float) -> LoadSeries:
        lo, hi = np.searchsorted(self.t_s, [start_s, end_s], side="left")
        micro = None if self.micro_batch is None else self.micro_batch[lo:hi]
        return LoadSeries(self.t_s[lo:hi], self.running[lo:hi], self.queued[lo:hi], micro)


@dataclass(frozen=True)
class Recording:
    """Telemetry of a set of GPUs over a span of time, with what is known about them."""

    gpus: tuple[GpuInfo, ...]
    series: Mapping[int, GpuSeries]
    topology: Topology | None = None
    load: LoadSeries = field(default_factory=LoadSeries.empty)
    events: tuple[Event, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)

    @property
    def start_s(self) -> float:
        starts = [float(s.t_s[0]) for s in self.series.values() if len(s)]
        return min(starts) if starts else float("nan")

    @property
    def end_s(self) -> float:
        ends = [float(s.t_s[-1]) for s in self.series.values() if len(s)]
        return max(ends) if ends else float("nan")

    @property
    def duration_s(self) -> float:
        d = self.end_s - self.start_s
        return d if np.isfinite(d) else 0.0

    @property
    def n_samples(self) -> int:
        return sum(len(s) for s in self.series.values())

    def metrics(self) -> set[Metric]:
        """Metrics reported by at least one GPU."""
        return {m for s in self.series.values() for m in s.values if s.has(m)}

    def window(self, start_s: float, end_s: float) -> Recording:
        """The part of the recording with start_s <= t < end_s."""
        return replace(
            self,
            series={g: s.window(start_s, end_s) for g, s in self.series.items()},
            load=self.load.window(start_s, end_s),
            events=tuple(e for e in self.events if start_s <= e.t_s < end_s),
        )

    def last(self, seconds: float) -> Recording:
        """The trailing `seconds` of the recording."""
        end = self.end_s
        return self.window(end - seconds, np.nextafter(end, np.inf))

    def with_topology(self, topology: Topology | None) -> Recording:
        return replace(self, topology=topology)

    def samples(self) -> Iterator[Sample]:
        """Row view in time order (ties by GPU), for writers."""
        rows: list[tuple[float, int, int]] = []
        for g, s in self.series.items():
            rows.extend((float(t), g, i) for i, t in enumerate(s.t_s))
        rows.sort()
        for t, g, i in rows:
            s = self.series[g]
            vals = {m: float(v[i]) for m, v in s.values.items() if np.isfinite(v[i])}
            yield Sample(t, g, vals)


# A GPU's runs of columns are laid end to end once they hold this many rows (and
# again each time they hold a quarter of what was laid end to end before).
_CONSOLIDATE_ROWS = 16_384


class RecordingBuilder:
    """Collects rows (records or runs of columns, in any order) and builds a columnar Recording.

    Row records (`add`) and columns (`add_columns`) may be mixed; each GPU's
    rows are put in time order at `build`, rows of the same instant in the
    order they came.
    """

    def __init__(self) -> None:
        self._gpus: dict[int, GpuInfo] = {}
        self._parts: dict[int, list[Part]] = {}
        self._rows: dict[int, list[Sample]] = {}
        self._load_parts: list[LoadSeries] = []
        self._load: list[LoadSample] = []
        self._events: list[Event] = []
        self.topology: Topology | None = None
        self.meta: dict[str, Any] = {}

    def add_gpu(self, info: GpuInfo) -> None:
        self._gpus[info.index] = info
        self._parts.setdefault(info.index, [])

    def add(self, sample: Sample) -> None:
        if sample.gpu not in self._gpus:
            self._gpus[sample.gpu] = GpuInfo(index=sample.gpu)
        self._rows.setdefault(sample.gpu, []).append(sample)

    def extend(self, samples: Iterable[Sample]) -> None:
        for s in samples:
            self.add(s)

    def add_columns(self, gpu: int, t_s: FloatArray, values: Mapping[Metric, FloatArray]) -> None:
        """A run of one GPU's rows: times and per-metric values (NaN: not reported)."""
        if gpu not in self._gpus:
            self._gpus[gpu] = GpuInfo(index=gpu)
        self._flush(gpu)
        parts = self._parts.setdefault(gpu, [])
        parts.append((t_s, values))
        if len(parts) >= 2 and sum(len(p[0]) for p in parts[1:]) >= max(
            _CONSOLIDATE_ROWS, len(parts[0][0]) // 4
        ):
            # Many small runs as one array, the one before them included: their memory
            # (small blocks that the allocator keeps once freed) is let go as they come.
            self._parts[gpu] = [merge_parts(parts)]

    def add_load(self, load: LoadSample) -> None:
        self._load.append(load)

    def add_load_columns(
        self,
        t_s: FloatArray,
        running: FloatArray,
        queued: FloatArray,
        micro_batch: FloatArray | None = None,
    ) -> None:
        """A run of load readings (NaN: unknown; micro_batch: see LoadSeries)."""
        self._flush_load()
        if micro_batch is not None and not bool(np.isfinite(micro_batch).any()):
            micro_batch = None
        self._load_parts.append(LoadSeries(t_s, running, queued, micro_batch))

    def add_event(self, event: Event) -> None:
        self._events.append(event)

    @property
    def n_gpus(self) -> int:
        """GPUs seen so far (given, or with rows)."""
        return len(self._gpus)

    @property
    def n_samples(self) -> int:
        parts = sum(len(t) for ps in self._parts.values() for t, _ in ps)
        return parts + sum(len(r) for r in self._rows.values())

    def build(self) -> Recording:
        """The Recording of the rows so far, which it takes over.

        The builder keeps its GPUs, topology and meta but no rows, load or
        events: it can collect the next piece of a long recording.
        """
        for g in list(self._rows):
            self._flush(g)
        self._flush_load()
        series: dict[int, GpuSeries] = {}
        for g in sorted(self._parts):
            t, values = merge_parts(self._parts[g])
            self._parts[g] = []
            series[g] = GpuSeries(g, t, values)
        shared = share_equal([s.t_s for s in series.values()])
        series = {g: replace(s, t_s=t) for (g, s), t in zip(series.items(), shared, strict=True)}
        load = self._build_load()
        events = tuple(sorted(self._events, key=lambda e: e.t_s))
        self._load_parts, self._events = [], []
        return Recording(
            gpus=tuple(self._gpus[g] for g in sorted(self._gpus)),
            series=series,
            topology=self.topology,
            load=load,
            events=events,
            meta=dict(self.meta),
        )

    def _flush(self, gpu: int) -> None:
        rows = self._rows.pop(gpu, None)
        if rows:
            self._parts.setdefault(gpu, []).append(_columns(rows))

    def _flush_load(self) -> None:
        if self._load:
            rows = self._load
            self._load = []
            self._load_parts.append(LoadSeries.from_samples(rows))

    def _build_load(self) -> LoadSeries:
        load = LoadSeries.concat(self._load_parts)
        return LoadSeries(
            load.t_s.astype(np.float64),
            load.running.astype(np.float64),
            load.queued.astype(np.float64),
            None if load.micro_batch is None else load.micro_batch.astype(np.float64),
        )


def _columns(rows: list[Sample]) -> Part:
    """Row records as one part: a metric is a column if any row has it."""
    t = np.array([r.t_s for r in rows], dtype=np.float64)
    present = {m for r in rows for m in r.values}
    values = {
        m: np.array([r.values.get(m, np.nan) for r in rows], dtype=np.float64) for m in present
    }
    return t, values


def recording_from_arrays(
    t_s: FloatArray,
    values: Mapping[Metric, npt.ArrayLike],
    *,
    gpus: Iterable[GpuInfo] | None = None,
    topology: Topology | None = None,
    load: LoadSeries | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Recording:
    """A Recording from a shared time axis and per-metric (n_gpus, n_samples) arrays.

    Handy for tests and for sources that sample all GPUs at the same instants.
    """
    t = np.asarray(t_s, dtype=np.float64)
    arrays = {m: np.atleast_2d(np.asarray(v, dtype=np.float64)) for m, v in values.items()}
    n_gpus = max((a.shape[0] for a in arrays.values()), default=0)
    infos = tuple(gpus) if gpus is not None else tuple(GpuInfo(index=i) for i in range(n_gpus))
    series = {
        info.index: GpuSeries(
            info.index, t, {m: a[k] for m, a in arrays.items() if np.isfinite(a[k]).any()}
        )
        for k, info in enumerate(infos)
    }
    return Recording(
        gpus=infos,
        series=series,
        topology=topology,
        load=load if load is not None else LoadSeries.empty(),
        meta=dict(meta or {}),
    )
