"""Per-rank profiler traces to one Recording on a fine grid, with exact totals in meta.

Each rank becomes one GPU (index = global rank), so `Topology.from_sizes(pp, tp)`
maps it to its stage like the engines do (rank r is stage r // tp).
`sm_active_ratio` is the fraction of each bin in which a compute kernel ran
(NCCL excluded); `kernel_busy_ratio` counts any kernel, NCCL waits included.
Bins are stamped at their end, like a polled counter averaged over the interval.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.kineto import intervals as iv
from bubblewatch.sources.kineto.reader import (
    DEFAULT_COMM_PATTERN,
    DeviceTimeline,
    RankTrace,
    read_rank_trace,
)

log = logging.getLogger(__name__)

_TRACE_SUFFIXES = (".json", ".json.gz")
_LONG_GAP_US = 1000.0


@dataclass(frozen=True)
class KinetoOptions:
    """How to turn kernel intervals into telemetry.

    `bin_s`: grid step of the Recording. `pp_size`/`tp_size`: the engine's
    parallel sizes when the traces do not say. `burst_gap_us`: kernel gaps
    shorter than this are launch gaps inside one stage step, longer ones are
    waits between steps (used for the stagger). `comm_pattern`: regular
    expression for communication kernel names.
    """

    bin_s: float = 0.01
    pp_size: int | None = None
    tp_size: int | None = None
    burst_gap_us: float = 200.0
    comm_pattern: str = DEFAULT_COMM_PATTERN

    def __post_init__(self) -> None:
        if not (self.bin_s > 0 and math.isfinite(self.bin_s)):
            raise ValueError(f"bin_s must be a positive number of seconds, got {self.bin_s!r}")
        for name in ("pp_size", "tp_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1, got {v!r}")
        if self.burst_gap_us < 0:
            raise ValueError(f"burst_gap_us must be >= 0, got {self.burst_gap_us!r}")


@dataclass(frozen=True)
class _Unit:
    """One GPU's timeline with its rank and where it came from."""

    rank: int
    trace: RankTrace
    timeline: DeviceTimeline | None


def trace_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Files to read: each given file, and the trace files inside each given directory.

    In a directory, names ending in `.trace.json(.gz)` (what SGLang and
    `tensorboard_trace_handler` write) are taken; when there are none, every
    `.json`/`.json.gz` file.
    """
    files: list[Path] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f for f in p.iterdir() if f.is_file() and f.name.endswith(_TRACE_SUFFIXES)
            )
            traces = [f for f in found if ".trace.json" in f.name]
            chosen = traces or found
            if not chosen:
                raise InputError(
                    "no profiler trace files (*.trace.json, *.json, *.json.gz) in this directory",
                    path=str(p),
                )
            files.extend(chosen)
        elif p.is_file():
            files.append(p)
        else:
            raise InputError("no such file or directory", path=str(p))
    return files


def load_kineto(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    options: KinetoOptions | None = None,
) -> Recording:
    """Read PyTorch profiler traces (one file per rank, or a directory of them) into a Recording."""
    opts = options or KinetoOptions()
    seq = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    files = trace_files(seq)
    traces = [read_rank_trace(f, comm_pattern=opts.comm_pattern) for f in files]
    return build_recording(traces, opts)


def build_recording(traces: Sequence[RankTrace], options: KinetoOptions) -> Recording:
    """The pure part of `load_kineto`: parsed traces to a Recording."""
    if not traces:
        raise InputError("no profiler traces given")
    units = _units(traces, options)
    topology, topo_source = _topology(units, options)
    origin_ns = min(u.trace.base_time_ns for u in units)
    offsets = {id(u.trace): (u.trace.base_time_ns - origin_ns) / 1000.0 for u in units}
    windows = [
        (w[0] + offsets[id(u.trace)], w[1] + offsets[id(u.trace)])
        for u in units
        if (w := u.trace.window_us) is not None
    ]
    if not windows:
        raise InputError("the traces hold no events at all", path=", ".join(t.path for t in traces))
    lo = min(w[0] for w in windows)
    hi = max(w[1] for w in windows)
    edges = _edges(lo, hi, options.bin_s * 1e6)
    t_s = origin_ns / 1e9 + edges[1:] / 1e6

    series: dict[int, GpuSeries] = {}
    gpus: list[GpuInfo] = []
    per_rank: dict[str, Any] = {}
    compute_by_rank: dict[int, iv.Intervals] = {}
    steps_by_rank: dict[int, iv.Intervals] = {}
    for u in units:
        off = offsets[id(u.trace)]
        compute, comm = _merged(u.timeline, off)
        any_kernel = iv.union(
            np.concatenate([compute.start_us, comm.start_us]),
            np.concatenate([compute.end_us, comm.end_us]),
        )
        w = u.trace.window_us
        w_lo, w_hi = (w[0] + off, w[1] + off) if w is not None else (lo, hi)
        inside = (edges[1:] > w_lo) & (edges[:-1] < w_hi)
        sm = np.where(inside, iv.busy_fraction(compute, edges), np.nan)
        kb = np.where(inside, iv.busy_fraction(any_kernel, edges), np.nan)
        series[u.rank] = GpuSeries(
            u.rank,
            t_s,
            {Metric.KERNEL_BUSY_RATIO: kb, Metric.SM_ACTIVE_RATIO: sm},
        )
        name = "" if u.timeline is None else u.trace.device_names.get(u.timeline.device, "")
        gpus.append(GpuInfo(index=u.rank, name=name))
        compute_by_rank[u.rank] = compute
        breaks = None if u.timeline is None else u.timeline.p2p_start_us + off
        steps_by_rank[u.rank] = iv.steps(compute, options.burst_gap_us, breaks)
        per_rank[str(u.rank)] = _rank_meta(
            u,
            compute=compute,
            comm=comm,
            any_kernel=any_kernel,
            window_us=(w_lo, w_hi),
            topology=topology,
        )

    span_us = hi - lo
    stages_meta = _stage_meta(topology, compute_by_rank, steps_by_rank, span_us)
    meta: dict[str, Any] = {
        "source": "kineto",
        "kineto": {
            "files": [t.path for t in traces],
            "bin_s": options.bin_s,
            "span_s": span_us / 1e6,
            "topology_source": topo_source,
            "truncated_files": [t.path for t in traces if t.truncated],
            "ranks": per_rank,
            **stages_meta,
        },
    }
    if any(t.truncated for t in traces):
        meta["truncated"] = True
    return Recording(
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        series=dict(sorted(series.items())),
        topology=topology,
        meta=meta,
    )


def _edges(lo_us: float, hi_us: float, bin_us: float) -> iv.FloatArray:
    n = int((hi_us - lo_us) // bin_us)
    if n < 1:
        return np.array([lo_us, max(hi_us, lo_us + 1e-3)])
    # The tail shorter than one bin is dropped so every bin has the same width.
    return lo_us + np.arange(n + 1, dtype=np.float64) * bin_us


def _merged(tl: DeviceTimeline | None, offset_us: float) -> tuple[iv.Intervals, iv.Intervals]:
    if tl is None:
        return iv.Intervals.empty(), iv.Intervals.empty()
    compute = iv.union(tl.compute_start_us, tl.compute_end_us).shifted(offset_us)
    comm = iv.union(tl.comm_start_us, tl.comm_end_us).shifted(offset_us)
    return compute, comm


# -- ranks ----------------------------------------------------------------------


def _units(traces: Sequence[RankTrace], options: KinetoOptions) -> list[_Unit]:
    multi = [t for t in traces if len(t.devices) > 1]
    if multi:
        if len(traces) > 1:
            raise InputError(
                f"kernels on {len(multi[0].devices)} devices in one file among several files: "
                "give one file per rank, or a single file of a single-process run",
                path=multi[0].path,
            )
        t = multi[0]
        return [_Unit(d, t, tl) for d, tl in t.devices.items()]
    ranks = _ranks(traces, options)
    units: list[_Unit] = []
    seen: dict[int, str] = {}
    for t, r in zip(traces, ranks, strict=True):
        if r in seen:
            raise InputError(
                f"rank {r} appears twice: in {seen[r]} and in this file (one file per rank)",
                path=t.path,
            )
        seen[r] = t.path
        tl = next(iter(t.devices.values()), None)
        if tl is None:
            log.warning("%s: no GPU kernels in this trace (rank %d); counted as idle", t.path, r)
        units.append(_Unit(r, t, tl))
    return sorted(units, key=lambda u: u.rank)


def _ranks(traces: Sequence[RankTrace], options: KinetoOptions) -> list[int]:
    if all(t.rank is not None for t in traces):
        return [t.rank for t in traces if t.rank is not None]
    if all(t.filename_tp_rank is not None for t in traces):
        # SGLang names files ...-TP-{tp}[-PP-{pp}]...: global rank = pp * tp_size + tp.
        tp = options.tp_size or max(t.filename_tp_rank or 0 for t in traces) + 1
        return [(t.filename_pp_rank or 0) * tp + (t.filename_tp_rank or 0) for t in traces]
    if all(t.filename_rank is not None for t in traces):
        return [t.filename_rank for t in traces if t.filename_rank is not None]
    if len(traces) > 1:
        log.warning(
            "no rank in the traces (distributedInfo) or their names; ranks follow file order: %s",
            ", ".join(Path(t.path).name for t in traces),
        )
    return list(range(len(traces)))


def _topology(units: Sequence[_Unit], options: KinetoOptions) -> tuple[Topology, str]:
    ranks = [u.rank for u in units]
    n = max(ranks) + 1
    try:
        if options.pp_size is not None or options.tp_size is not None:
            tp = options.tp_size or 1
            pp = options.pp_size or math.ceil(n / tp)
            if n > pp * tp:
                raise InputError(
                    f"rank {n - 1} does not fit pp_size {pp} x tp_size {tp}",
                    path=units[-1].trace.path,
                )
            return Topology.from_sizes(pp, tp, source="kineto:options"), "options"
        from_names = _topology_from_filenames(units)
        if from_names is not None:
            return from_names, "filenames"
        from_groups = _topology_from_process_groups(units)
        if from_groups is not None:
            return from_groups, "process_groups"
    except TopologyError as e:
        raise InputError(f"inconsistent topology: {e}", path=units[0].trace.path) from e
    world = units[0].trace.world_size
    if world is not None and world > 1 and len(units) > 1:
        log.warning(
            "pipeline/tensor parallel sizes unknown: assuming one rank per stage (tp_size 1); "
            "pass pp_size/tp_size if that is wrong"
        )
    return Topology(stages=tuple((r,) for r in sorted(ranks)), source="kineto:assumed"), "assumed"


def _topology_from_filenames(units: Sequence[_Unit]) -> Topology | None:
    if not all(u.trace.filename_pp_rank is not None for u in units):
        return None
    stages: dict[int, list[int]] = {}
    for u in units:
        stages.setdefault(u.trace.filename_pp_rank or 0, []).append(u.rank)
    order = sorted(stages)
    if order != list(range(len(order))):
        return None
    return Topology(
        stages=tuple(tuple(sorted(stages[s])) for s in order), source="kineto:filenames"
    )


def _topology_from_process_groups(units: Sequence[_Unit]) -> Topology | None:
    """A process group whose ranks step by tp (0, tp, 2tp, ...) is a pipeline group."""
    world = units[0].trace.world_size
    pgs = units[0].trace.distributed.get("pg_config")
    if world is None or not isinstance(pgs, list):
        return None
    for pg in pgs:
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if not isinstance(ranks, list) or len(ranks) < 2 or len(ranks) >= world:
            continue
        if not all(isinstance(r, int) for r in ranks):
            continue
        steps = {b - a for a, b in itertools.pairwise(ranks)}
        if len(steps) != 1:
            continue
        tp = steps.pop()
        pp = len(ranks)
        if tp > 1 and pp * tp == world:
            return Topology.from_sizes(pp, tp, source="kineto:process_groups")
    return None


# -- meta -----------------------------------------------------------------------


def _rank_meta(
    u: _Unit,
    *,
    compute: iv.Intervals,
    comm: iv.Intervals,
    any_kernel: iv.Intervals,
    window_us: tuple[float, float],
    topology: Topology,
) -> dict[str, Any]:
    span_us = window_us[1] - window_us[0]
    gap = iv.gaps(compute)
    comm_only = iv.subtract(comm, compute)
    tl = u.timeline
    n_compute = 0 if tl is None else int(tl.compute_start_us.size)
    n_comm = 0 if tl is None else int(tl.comm_start_us.size)
    return {
        "file": u.trace.path,
        "device": None if tl is None else tl.device,
        "stage": topology.stage_of(u.rank),
        "span_s": span_us / 1e6,
        "compute_busy_s": compute.total_us / 1e6,
        "comm_s": comm.total_us / 1e6,
        "comm_only_s": comm_only.total_us / 1e6,
        "any_kernel_busy_s": any_kernel.total_us / 1e6,
        "compute_busy_ratio": compute.total_us / span_us if span_us > 0 else None,
        "n_compute_kernels": n_compute,
        "n_comm_kernels": n_comm,
        "n_streams": 0 if tl is None else tl.n_streams,
        "copy_s": u.trace.copy_us / 1e6,
        "launches": dict(u.trace.launches),
        "idle_gaps": {
            "count": int(gap.size),
            "total_s": float(gap.sum()) / 1e6,
            "p50_us": float(np.median(gap)) if gap.size else None,
            "p99_us": float(np.percentile(gap, 99)) if gap.size else None,
            "max_us": float(gap.max()) if gap.size else None,
            "over_1ms": int(np.count_nonzero(gap > _LONG_GAP_US)),
        },
        "truncated": u.trace.truncated,
    }


def _stage_meta(
    topology: Topology,
    compute_by_rank: Mapping[int, iv.Intervals],
    steps_by_rank: Mapping[int, iv.Intervals],
    span_us: float,
) -> dict[str, Any]:
    stages: list[dict[str, Any]] = []
    leads: list[iv.Intervals | None] = []
    lead_compute: list[iv.Intervals] = []
    for s, ranks in enumerate(topology.stages):
        present = [r for r in ranks if r in compute_by_rank]
        busy = [compute_by_rank[r].total_us for r in present]
        busy_us = float(np.mean(busy)) if busy else float("nan")
        stages.append(
            {
                "stage": s,
                "ranks": list(ranks),
                "busy_s": busy_us / 1e6 if busy else None,
                "busy_ratio": busy_us / span_us if busy and span_us > 0 else None,
            }
        )
        leads.append(steps_by_rank[present[0]] if present else None)
        if present:
            lead_compute.append(compute_by_rank[present[0]])
    staggers: list[dict[str, Any]] = []
    for s in range(len(leads) - 1):
        a, b = leads[s], leads[s + 1]
        if a is None or b is None:
            continue
        period = np.diff(a.start_us)
        # Farther than 1.5 step periods is not the same micro-batch any more.
        max_delay = 1.5 * float(np.median(period)) if period.size else math.inf
        st = iv.stagger(a, b, max_delay)
        if st is not None:
            staggers.append(
                {
                    "from_stage": s,
                    "to_stage": s + 1,
                    "mean_us": round(st.mean_us, 3),
                    "median_us": round(st.median_us, 3),
                    "n": st.n,
                }
            )
    ratios = [st["busy_ratio"] for st in stages if st["busy_ratio"] is not None]
    return {
        "stages": stages,
        "stagger": staggers,
        "concurrency": float(sum(ratios)) if ratios else None,
        "busy_stages_time_s": _concurrency_histogram(lead_compute),
    }


def _concurrency_histogram(stage_busy: Sequence[iv.Intervals]) -> dict[str, float]:
    """Seconds during which exactly k stages computed at once, k >= 1."""
    if not stage_busy:
        return {}
    starts = np.concatenate([x.start_us for x in stage_busy])
    ends = np.concatenate([x.end_us for x in stage_busy])
    t = np.concatenate([starts, ends])
    step = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
    order = np.lexsort((step, t))  # ends before starts at equal times
    t, step = t[order], step[order]
    level = np.cumsum(step)[:-1]
    dt = np.diff(t)
    out: dict[str, float] = {}
    for k in range(1, len(stage_busy) + 1):
        secs = float(dt[level == k].sum()) / 1e6
        if secs > 0:
            out[str(k)] = secs
    return out
