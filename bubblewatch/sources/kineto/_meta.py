"""The exact totals a Kineto recording carries in `meta["kineto"]`, per rank and per stage.

Per rank: busy, communication and copy time, kernel counts and the idle gaps
between compute kernels. Per stage: busy ratio, the stagger between adjacent
stages' steps, and how long exactly k stages computed at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bubblewatch.model.topology import Topology
from bubblewatch.sources.kineto import intervals as iv
from bubblewatch.sources.kineto._ranks import Unit

_LONG_GAP_US = 1000.0


def rank_meta(
    u: Unit,
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


def stage_meta(
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
