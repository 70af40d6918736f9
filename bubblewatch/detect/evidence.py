"""A diagnosis's evidence: the window's statistics and findings as rounded, named values.

`window_evidence` gives the evidence keys (docs/detection.md), `shape_evidence`
the job's shape in words, `stage_stats` the per-stage rows. Formatting only:
everything here is measured before (detect.stats, detect.measures, detect.level_range).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.context import Context, in_flight, running_requests, running_source
from bubblewatch.detect.grid import Grid
from bubblewatch.detect.level_range import RANGE_KEYS, level_range
from bubblewatch.detect.levels import Levels
from bubblewatch.detect.measures import one_gpu_stages
from bubblewatch.detect.shape import gpu_count_note, job_shape
from bubblewatch.detect.stats import WindowStats
from bubblewatch.detect.steps import Steps
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.training import TrainingView, training_evidence
from bubblewatch.detect.types import EvidenceValue, Finding, StageStats, Verdict
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology


def _f(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _opt(a: npt.NDArray[np.float64] | None, i: int) -> float | None:
    return None if a is None else _f(float(a[i]))


def stage_stats(st: WindowStats, steps: Steps | None) -> tuple[StageStats, ...]:
    busy = None if steps is None else steps.stage_busy_s
    out = []
    for i, gpus in enumerate(st.stages):
        extra: dict[str, EvidenceValue] = {"tp_disagreement": _f(float(st.tp_disagreement[i]))}
        if busy is not None:
            extra["busy_s_per_step"] = _f(busy[i], 4)
        out.append(
            StageStats(
                stage=i,
                gpus=gpus,
                occupancy_ratio=float(st.occupancy[i]),
                sm_active_ratio=_opt(st.sm_active, i),
                kernel_busy_ratio=_opt(st.kernel_busy, i),
                power_w=_opt(st.power_w, i),
                idle_power_w=_f(float(st.idle_power_w[i])),
                spin_ratio=_opt(st.spin, i),
                lag_s=_f(float(st.lag_s[i]), 4),
                bubble_energy_j=_opt(st.bubble_energy_j, i),
                extra=extra,
            )
        )
    return tuple(out)


def window_evidence(
    ctx: Context, *, findings: list[Finding], topo: Topology | None, grid: Grid
) -> dict[str, EvidenceValue]:
    st, levels, load, inferred = ctx.stats, ctx.levels, ctx.load, ctx.inferred
    straggler = next((f for f in findings if f.verdict is Verdict.STRAGGLER), None)
    imbalanced = any(f.verdict is Verdict.IMBALANCED for f in findings)
    rho = st.lag_rank_correlation
    agreement: bool | None = None
    lags = st.lag_s[np.isfinite(st.lag_s)]
    # Lags all within a fraction of a step cannot order anything: no verdict on the topology.
    resolvable = lags.size >= 2 and float(np.ptp(lags)) >= 0.5 * st.step_s
    if topo is not None and st.pp_size > 1 and rho is not None and resolvable:
        agreement = True if rho >= 0.7 else False if rho <= 0.3 else None
    waves = None if ctx.steps is None else ctx.steps.waves
    if topo is not None and waves is not None and waves.rank_correlation is not None:
        # A training step's waves order the stages better than slow load changes can.
        w = waves.rank_correlation
        agreement = True if w >= 0.7 else False if w <= 0.3 else None
    gpu_rows = list(st.health)
    idle_by_gpu = {str(h.gpu): _f(float(levels.idle_power_w[k]), 1) for k, h in enumerate(gpu_rows)}
    ev: dict[str, EvidenceValue] = {
        "signal": levels.signal,
        "pp_size": st.pp_size,
        "tp_size": max(len(s) for s in st.stages),
        "concurrency": _f(st.concurrency),
        "bubble_ratio": _f(st.bubble_ratio),
        "mean_occupancy_ratio": _f(float(np.mean(st.occupancy))),
        "lag_rank_correlation": _f(rho),
        "spin_ratio": None if st.spin is None else _f(float(np.max(st.spin))),
        "launch_bound_index": _f(st.launch_bound_index),
        "imbalance_ratio": _f(st.imbalance_ratio),
        "imbalanced_stage": st.imbalanced_stage if imbalanced else None,
        "straggler_gpu": None if straggler is None else straggler.gpu,
        "throttle_reasons": [] if straggler is None else straggler.evidence["throttle_reasons"],
        "bubble_energy_j": None
        if st.bubble_energy_j is None
        else _f(float(st.bubble_energy_j.sum()), 1),
        "topology_agreement": agreement,
        "queued_requests": _f(load.queued),
        **_new_evidence(ctx, findings, topo),
        # Beyond the contract: how the levels were learned and how the window looked.
        "concurrency_p90": _f(st.concurrency_p90),
        "concurrency_median": _f(st.concurrency_median),
        "lag_pairs_significant": _f(st.lag_pairs_significant),
        "stage_zero_lag_correlation": _f(st.stage_zero_lag_correlation),
        "power_fraction": _f(st.power_fraction),
        "kernel_gap_ratio": _f(st.kernel_gap_ratio),
        "spin_sm_active_ratio": _f(levels.spin_sm_active),
        "compute_sm_active_ratio": _f(levels.compute_sm_active),
        "compute_level_learned": levels.compute_sm_learned,
        "compute_power_w": _f(levels.compute_power_w, 1),
        "idle_power_w": idle_by_gpu,
        "idle_power_source": sorted(set(levels.idle_power_source)),
        "step_s": _f(st.step_s, 4),
        "topology_source": "given" if topo is not None else "inferred",
    }
    if inferred is not None:
        ev["inferred_stages"] = [list(s) for s in inferred.stages[: len(inferred.groups)]]
        ev["inferred_topology_confidence"] = _f(inferred.confidence)
        ev["idle_gpus"] = list(inferred.idle_gpus)
        ev["inference"] = inferred.reason
        if inferred.order_source:
            ev["stage_order_source"] = inferred.order_source
    ev["compute_level_source"] = dict(
        zip((str(g) for g in grid.gpus), levels.compute_level_source, strict=False)
    )
    if levels.compute_sm_by_gpu is not None:
        ev["compute_sm_active_by_gpu"] = {
            str(g): _f(float(v)) for g, v in zip(grid.gpus, levels.compute_sm_by_gpu, strict=True)
        }
    ev["power_reference_w"] = _f(levels.power_reference_w, 1)
    ev["power_reference_source"] = levels.power_reference_source
    turns = inferred is not None and one_gpu_stages(inferred)
    ev.update(_range_evidence(grid, levels, st, ctx.options, turns=turns))
    return ev


def _range_evidence(
    grid: Grid, levels: Levels, st: WindowStats, options: DetectOptions, *, turns: bool
) -> dict[str, EvidenceValue]:
    """Where the compute level is uncertain: the concurrency and bubble ranges, and why."""
    share = options.working_share_of_power_limit
    r = level_range(grid, levels, st.stages, st.concurrency, share, turns=turns)
    if r is None:
        return dict.fromkeys(RANGE_KEYS)
    return {
        "concurrency_low": _f(r.concurrency_low),
        "concurrency_high": _f(r.concurrency_high),
        "bubble_ratio_low": _f(r.bubble_low),
        "bubble_ratio_high": _f(r.bubble_high),
        "bubble_range_reason": r.reason,
    }


def shape_evidence(
    ctx: Context, ev: dict[str, EvidenceValue], recording: Recording, gpus: Sequence[int]
) -> dict[str, EvidenceValue]:
    """The job's shape in words, how its GPUs were counted and named, its time waiting in
    collectives."""
    cw = ctx.collective_wait
    inferred = ctx.inferred
    tied = [] if cw is None else [*ev["holding_gpus"], *ev["waiting_gpus"]]  # type: ignore[misc]
    kind, text = job_shape(
        pipeline_evidence=str(ev["pipeline_evidence"]),
        stages=ctx.stats.stages,
        groups=None if inferred is None else inferred.groups,
        idle_gpus=() if inferred is None else inferred.idle_gpus,
        waiting_together=sorted(tied),
        topology_given=ctx.topology_given,
    )
    return {
        "job_shape": kind,
        "job": text,
        "gpu_count_note": gpu_count_note(recording.meta, len(gpus)),
        "collective_wait_share_ratio": None if cw is None else cw.evidence["share_ratio"],
        "collective_wait_event_count": None if cw is None else cw.evidence["event_count"],
        **gpu_model_evidence(recording.meta, gpus),
    }


def gpu_model_evidence(meta: Mapping[str, Any], gpus: Sequence[int]) -> dict[str, EvidenceValue]:
    """Where the analysed GPUs' model names came from, where a model was given for the
    recording (`meta["gpu_model_from"]`, set by bubblewatch.analysis.gpu_model): "option",
    "recording", or "option and recording" (nothing where none was given)."""
    given = meta.get("gpu_model_from")
    if not isinstance(given, Mapping):
        return {}
    seen = sorted({str(given[str(g)]) for g in gpus if str(g) in given})
    return {"gpu_model_from": " and ".join(seen) if seen else None}


def _view(ctx: Context) -> TrainingView | None:
    return None if ctx.steps is None else TrainingView(ctx.steps, ctx.judgement)


def _new_evidence(
    ctx: Context, findings: list[Finding], topo: Topology | None
) -> dict[str, EvidenceValue]:
    """Pipeline evidence, in-flight estimate, schedule and collective-wait keys."""
    inferred, st = ctx.inferred, ctx.stats
    source = "topology" if topo is not None and topo.pp_size > 1 else "none"
    if inferred is not None and inferred.is_pipeline:
        source = "turn_taking" if inferred.kind == "layer_split" else "stagger"
    turns = inferred.turns if inferred is not None and inferred.is_pipeline else None
    test = turns or (inferred.stagger if inferred is not None else None)
    k = in_flight(ctx)
    cw = next((f for f in findings if f.verdict is Verdict.COLLECTIVE_WAIT), None)
    allowed = efficiency = None
    if ctx.schedule is not None and source != "none":
        allowed = ctx.schedule.bubble_ratio(st.pp_size)
        efficiency = (1.0 - st.bubble_ratio) / max(1.0 - allowed, 1e-9)
    counted = k.estimate if source != "none" else None
    return {
        "running_requests": _f(running_requests(ctx.load, counted)),
        "running_requests_source": running_source(ctx.load, counted),
        "micro_batch_requests": _f(ctx.load.micro_batch),
        "pipeline_evidence": source,
        "stagger_p_value": None if test is None else _f(test.p_value, 4),
        "concurrency_uncertainty": _f(k.sigma * k.working_level),
        "micro_batches_in_flight": _f(counted),
        "micro_batches_allowed": None
        if ctx.schedule is None or source == "none"
        else ctx.schedule.max_in_flight(st.pp_size),
        "expected_bubble_ratio": _f(allowed),
        "schedule_efficiency_ratio": _f(efficiency),
        **training_evidence(_view(ctx)),
        "holding_gpus": [] if cw is None else list(cw.evidence["holding_gpus"]),  # type: ignore[arg-type]
        "waiting_gpus": [] if cw is None else list(cw.evidence["waiting_gpus"]),  # type: ignore[arg-type]
        "collective_wait_s": None if cw is None else cw.evidence["ongoing_s"],
        "collective_wait_energy_j": None if cw is None else cw.evidence["energy_j"],
    }
