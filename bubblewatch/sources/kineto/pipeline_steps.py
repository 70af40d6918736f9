"""Pipeline training in profiler traces: each rank's stage, and the exact bubble of every step.

Which stage a rank runs is in its trace: `distributedInfo.pg_config` lists the
process groups the rank belongs to, with the description its framework gave
them. Megatron-Core names its pipeline groups `PIPELINE_MODEL_PARALLEL_GROUP`
(`megatron/core/parallel_state.py`, `create_group(..., group_desc=...)`,
core 0.14); a `torch.distributed.DeviceMesh` names each dimension's group
`mesh_<dim>` (torchtitan's "pp" dimension: `mesh_pp`). A rank's stage is its
index in that group's ordered ranks, whatever order the framework numbers
ranks in.

Steps are torch.profiler's `ProfilerStep#N` annotations, on the CPU thread:
the GPU work of step N starts with the rank's first kernel at or after the
marker. Step N spans from the earliest rank's GPU start of N to the earliest
GPU start of N+1 (the last step to the last kernel's end): every rank of a
synchronous training step shares it. In that
window each stage's busy time is its ranks' compute-kernel time (mean over
the stage's GPUs); the step's bubble is 1 - sum(busy) / (p x window), the
exact share of stage-time no stage computed. P2P waits (send/recv kernels not
overlapping compute) are reported per stage: the part of the bubble spent
waiting on a neighbour stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.kineto import intervals as iv
from bubblewatch.sources.kineto.reader import DeviceTimeline, RankTrace

PIPELINE_GROUP_DESCS = ("PIPELINE_MODEL_PARALLEL_GROUP", "mesh_pp")

StepWindows = Sequence[tuple[int, float, float]]


def pipeline_group(trace: RankTrace, rank: int) -> tuple[int, int, str] | None:
    """(stage, stages, group description) from the rank's named pipeline group, if any."""
    pgs = trace.distributed.get("pg_config")
    if not isinstance(pgs, list):
        return None
    for pg in pgs:
        if not isinstance(pg, dict) or pg.get("pg_desc") not in PIPELINE_GROUP_DESCS:
            continue
        ranks = pg.get("ranks")
        if isinstance(ranks, list) and rank in ranks and len(ranks) > 1:
            return ranks.index(rank), len(ranks), str(pg["pg_desc"])
    return None


def topology_from_pipeline_groups(ranks_traces: Sequence[tuple[int, RankTrace]]) -> Topology | None:
    """Stages from every trace's named pipeline group; None unless all traces have one."""
    by_stage: dict[int, list[int]] = {}
    sizes: set[int] = set()
    for rank, trace in ranks_traces:
        hit = pipeline_group(trace, rank)
        if hit is None:
            return None
        stage, size, _ = hit
        sizes.add(size)
        by_stage.setdefault(stage, []).append(rank)
    if len(sizes) != 1 or sorted(by_stage) != list(range(sizes.pop())):
        return None
    try:
        return Topology(
            stages=tuple(tuple(sorted(by_stage[s])) for s in sorted(by_stage)),
            source="kineto:pipeline_groups",
        )
    except TopologyError:
        return None


def p2p_intervals(tl: DeviceTimeline | None, offset_us: float) -> iv.Intervals:
    """The point-to-point (send/recv) kernels of a timeline, merged, on the common clock."""
    if tl is None or tl.p2p_start_us.size == 0:
        return iv.Intervals.empty()
    is_p2p = np.isin(tl.comm_start_us, tl.p2p_start_us)
    return iv.union(tl.comm_start_us[is_p2p], tl.comm_end_us[is_p2p]).shifted(offset_us)


def pipeline_steps_meta(
    topology: Topology,
    compute_by_rank: Mapping[int, iv.Intervals],
    p2p_by_rank: Mapping[int, iv.Intervals],
    steps_by_rank: Mapping[int, StepWindows],
) -> dict[str, Any] | None:
    """Per-step busy share and bubble of a pipeline; None without steps or a pipeline."""
    p = topology.pp_size
    ranks = [r for st in topology.stages for r in st]
    if p < 2 or not all(steps_by_rank.get(r) for r in ranks):
        return None
    common = set.intersection(*({n for n, _, _ in steps_by_rank[r]} for r in ranks))
    if not common:
        return None
    numbers = sorted(common)
    starts = {r: {n: s for n, s, _ in steps_by_rank[r]} for r in ranks}
    ends = {r: {n: e for n, _, e in steps_by_rank[r]} for r in ranks}
    lo = np.array([min(starts[r][n] for r in ranks) for n in numbers])
    hi = np.array(
        [
            min(starts[r][numbers[i + 1]] for r in ranks)
            if i + 1 < len(numbers) and numbers[i + 1] == n + 1
            else max(ends[r][n] for r in ranks)
            for i, n in enumerate(numbers)
        ]
    )
    width = hi - lo
    busy = np.zeros((p, len(numbers)))
    wait = np.zeros((p, len(numbers)))
    for s, stage in enumerate(topology.stages):
        for r in stage:
            comp = compute_by_rank.get(r, iv.Intervals.empty())
            idle_p2p = iv.subtract(p2p_by_rank.get(r, iv.Intervals.empty()), comp)
            busy[s] += iv.covered_before(comp, hi) - iv.covered_before(comp, lo)
            wait[s] += iv.covered_before(idle_p2p, hi) - iv.covered_before(idle_p2p, lo)
        busy[s] /= len(stage)
        wait[s] /= len(stage)
    ok = width > 0
    busy_ratio = np.where(ok, busy / np.where(ok, width, 1.0), np.nan)
    wait_ratio = np.where(ok, wait / np.where(ok, width, 1.0), np.nan)
    bubble = 1.0 - np.nansum(busy_ratio, axis=0) / p
    steps = [
        {
            "step": n,
            "start_us": round(float(lo[i]), 3),
            "duration_s": round(float(width[i]) / 1e6, 6),
            "stage_busy_ratio": [round(float(x), 4) for x in busy_ratio[:, i]],
            "stage_p2p_wait_ratio": [round(float(x), 4) for x in wait_ratio[:, i]],
            "bubble_ratio": round(float(bubble[i]), 4),
        }
        for i, n in enumerate(numbers)
        if ok[i]
    ]
    if not steps:
        return None
    ratios = np.array([st["bubble_ratio"] for st in steps])
    return {
        "pp_size": p,
        "steps": steps,
        "bubble_ratio_mean": round(float(ratios.mean()), 4),
        "bubble_ratio_median": round(float(np.median(ratios)), 4),
        "step_s_median": round(float(np.median(width[ok])) / 1e6, 6),
        "stage_busy_ratio_mean": [round(float(x), 4) for x in np.nanmean(busy_ratio, axis=1)],
        "stage_p2p_wait_ratio_mean": [round(float(x), 4) for x in np.nanmean(wait_ratio, axis=1)],
    }


def step_windows(
    trace: RankTrace, tl: DeviceTimeline | None, offset_us: float
) -> list[tuple[int, float, float]]:
    """A trace's profiler steps on the common clock, moved to the GPU work they launched.

    Each step starts at the first kernel at or after its CPU marker; the last
    step ends with the rank's last kernel, the others where the next begins.
    """
    if tl is None or not trace.profiler_steps:
        return []
    starts = np.sort(np.concatenate([tl.compute_start_us, tl.comm_start_us])) + offset_us
    if starts.size == 0:
        return []
    last_end = float(
        max(np.max(tl.compute_end_us, initial=-np.inf), np.max(tl.comm_end_us, initial=-np.inf))
    )
    cpu = np.array([s for _, s, _ in trace.profiler_steps]) + offset_us
    k = np.searchsorted(starts, cpu, side="left")
    gpu = np.where(k < starts.size, starts[np.clip(k, 0, starts.size - 1)], np.inf)
    out = []
    for i, (n, _, _) in enumerate(trace.profiler_steps):
        if not np.isfinite(gpu[i]):
            break
        nxt = gpu[i + 1] if i + 1 < gpu.size else np.inf
        out.append((n, float(gpu[i]), float(nxt) if np.isfinite(nxt) else last_end + offset_us))
    return out
