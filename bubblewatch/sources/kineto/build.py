"""Per-rank profiler traces to one Recording on a fine grid, with exact totals in meta.

Each rank becomes one GPU (index = global rank), so `Topology.from_sizes(pp, tp)`
maps it to its stage like the engines do (rank r is stage r // tp).
`sm_active_ratio` is the fraction of each bin in which a compute kernel ran
(NCCL excluded); `kernel_busy_ratio` counts any kernel, NCCL waits included.
Bins are stamped at their end, like a polled counter averaged over the interval.

Pure: parsed traces in, Recording out. Reading the files is
bubblewatch.sources.kineto.loader; ranks and stages come from `_ranks`, the
exact totals in meta from `_meta`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.sources.kineto import intervals as iv
from bubblewatch.sources.kineto._meta import rank_meta, stage_meta
from bubblewatch.sources.kineto._ranks import rank_units, stage_topology
from bubblewatch.sources.kineto.options import KinetoOptions
from bubblewatch.sources.kineto.pipeline_steps import (
    p2p_intervals,
    pipeline_steps_meta,
    step_windows,
)
from bubblewatch.sources.kineto.reader import DeviceTimeline, RankTrace


def build_recording(traces: Sequence[RankTrace], options: KinetoOptions) -> Recording:
    """The pure part of `load_kineto`: parsed traces to a Recording."""
    if not traces:
        raise InputError("no profiler traces given")
    units = rank_units(traces, options)
    topology, topo_source = stage_topology(units, options)
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
    p2p_by_rank: dict[int, iv.Intervals] = {}
    windows_by_rank: dict[int, list[tuple[int, float, float]]] = {}
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
        p2p_by_rank[u.rank] = p2p_intervals(u.timeline, off)
        windows_by_rank[u.rank] = step_windows(u.trace, u.timeline, off)
        per_rank[str(u.rank)] = rank_meta(
            u,
            compute=compute,
            comm=comm,
            any_kernel=any_kernel,
            window_us=(w_lo, w_hi),
            topology=topology,
        )

    span_us = hi - lo
    stages_meta = stage_meta(topology, compute_by_rank, steps_by_rank, span_us)
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
    # Training: the exact bubble of every profiler step (pipeline_steps).
    per_step = pipeline_steps_meta(topology, compute_by_rank, p2p_by_rank, windows_by_rank)
    if per_step is not None:
        meta["kineto"]["pipeline_steps"] = per_step
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
