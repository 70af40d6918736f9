"""`diagnose`: one telemetry window plus topology to a Diagnosis with verdicts and evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.classify import classify
from bubblewatch.detect.context import Context, in_flight, running_requests, running_source
from bubblewatch.detect.context import load_limited as load_limited_for
from bubblewatch.detect.grid import Grid, resample, sampling_interval_s
from bubblewatch.detect.health import gpu_health
from bubblewatch.detect.infer import InferredTopology, infer_topology
from bubblewatch.detect.jobs import (
    GpuWindow,
    collective_wait_finding,
    job_idle_levels,
    memory_in_use_b,
    underfed_finding,
)
from bubblewatch.detect.lag import LagMemo
from bubblewatch.detect.level_range import RANGE_KEYS, busy_at_most_utilization, level_range
from bubblewatch.detect.levels import (
    LEVEL_ASSUMED,
    SIGNAL_POWER,
    SIGNAL_SM,
    Levels,
    learn_levels,
    occupancy,
    power_metric,
)
from bubblewatch.detect.shape import gpu_count_note, job_shape
from bubblewatch.detect.stats import WindowStats, window_stats
from bubblewatch.detect.steps import Steps
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.training import TrainingView, step_extras, training_evidence, training_view
from bubblewatch.detect.types import (
    EVIDENCE_KEYS,
    Diagnosis,
    EvidenceValue,
    Finding,
    LoadContext,
    StageStats,
    Verdict,
)
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology

_GRID_METRICS = (
    Metric.SM_ACTIVE_RATIO,
    Metric.KERNEL_BUSY_RATIO,
    Metric.POWER_INSTANT_W,
    Metric.POWER_AVG_W,
    Metric.MEMORY_USED_BYTES,
)


def _memory_used(w: GpuWindow) -> tuple[tuple[int, float], ...]:
    mem = memory_in_use_b(w)
    if mem is None:
        return ()
    return tuple((g, float(b)) for g, b in zip(w.gpus, mem.tolist(), strict=True) if np.isfinite(b))


def load_context(recording: Recording) -> LoadContext:
    """Mean running and queued requests (and micro-batch size) over the recording's load."""
    load = recording.load

    def mean(a: npt.NDArray[np.float64] | None) -> float | None:
        if a is None:
            return None
        ok = np.isfinite(a)
        return float(a[ok].mean()) if ok.any() else None

    return LoadContext(
        running=mean(load.running), queued=mean(load.queued), micro_batch=mean(load.micro_batch)
    )


def diagnose(
    recording: Recording,
    topology: Topology | None = None,
    load: LoadContext | None = None,
    *,
    options: DetectOptions | None = None,
    schedule: PipelineSchedule | None = None,
    known_sm_levels: Mapping[int, float] | None = None,
) -> Diagnosis:
    """Verdicts, confidences and evidence for one window; pure (no I/O, no clocks).

    Pipeline verdicts need pipeline evidence: a topology of two or more stages,
    or (without one) GPU groups of a coherent shape whose stagger a null model
    cannot explain. `schedule` (a training pipeline's schedule and micro-batch
    count) has the pipeline's steps measured and its bubble judged against the
    one the schedule allows (`below_schedule` when it exceeds it). `known_sm_levels`
    (per GPU) are compute SM levels earlier windows of the same job learned (the
    `compute_sm_active_by_gpu` evidence of GPUs whose `compute_level_source` was
    learned, plateau or model): where this window can only assume one, it takes them.
    """
    opts = options or DetectOptions()
    topo = topology if topology is not None else recording.topology
    ctx_load = load if load is not None else load_context(recording)
    with_data = tuple(g for g, s in sorted(recording.series.items()) if len(s) > 0)
    gpus = topo.gpus if topo is not None else with_data
    n_samples = sum(len(recording.series[g]) for g in gpus if g in recording.series)

    def insufficient(reason: str, **ev: EvidenceValue) -> Diagnosis:
        return _insufficient(reason, recording, n_samples, ctx_load, ev)

    if not gpus:
        return insufficient("no GPU has any samples")
    missing = [g for g in gpus if g not in with_data]
    if missing:
        # Samples of GPUs the topology does not name are not analysed: say so, not silently.
        outside = [g for g in with_data if g not in gpus]
        elsewhere = (
            f"; samples came from GPU(s) {outside}, which it does not name (check the trace "
            "header's gpus and topology, or --topology/--gpus)"
            if outside
            else ""
        )
        return insufficient(
            f"GPU(s) {missing} of the topology have no samples{elsewhere}", missing=missing
        )
    few = [g for g in gpus if len(recording.series[g]) < opts.min_samples_per_gpu]
    if few:
        return insufficient(
            f"GPU(s) {few} have fewer than {opts.min_samples_per_gpu} samples",
            min_samples_per_gpu=opts.min_samples_per_gpu,
        )
    series = [recording.series[g] for g in gpus]
    if not any(s.has(Metric.SM_ACTIVE_RATIO) or _has_power(s) for s in series):
        return insufficient("neither SM activity nor power reported: occupancy cannot be measured")
    span_s = min(float(s.t_s[-1]) for s in series) - max(float(s.t_s[0]) for s in series)
    if span_s < opts.min_window_s:
        return insufficient(
            f"window of {span_s:.1f} s shared by all GPUs is shorter than {opts.min_window_s:g} s",
            window_s=round(span_s, 3),
        )
    interval = sampling_interval_s(recording, gpus)
    step = max(interval, opts.min_step_s)
    grid = resample(recording, gpus, _GRID_METRICS, step_s=step, max_gap_steps=opts.max_gap_steps)
    if grid.n_steps < opts.min_samples_per_gpu:
        return insufficient(f"only {grid.n_steps} common time steps")
    levels = learn_levels(grid, recording, opts, known_sm_levels=known_sm_levels)
    occ = occupancy(grid, levels)
    if not np.isfinite(occ).any():
        return insufficient("no usable occupancy signal in the window")

    pm = power_metric(grid)
    power = grid.values[pm] if pm is not None else None
    kb = grid.get(Metric.KERNEL_BUSY_RATIO)
    memory = grid.get(Metric.MEMORY_USED_BYTES)
    inferred: InferredTopology | None = None
    lags = LagMemo()  # pairwise lags found by inference, for the statistics
    if topo is None:
        inferred = infer_topology(
            grid.gpus, occ, step, opts, power=power, kernel_busy=kb, memory_b=memory, lags=lags
        )
        allowed = opts.infer_pipelines or (
            inferred.kind == "layer_split" and opts.infer_layer_split
        )
        if inferred.is_pipeline and not allowed:
            inferred = replace(
                inferred,
                is_pipeline=False,
                confidence=0.0,
                reason=f"no engine or topology known, so not judged a pipeline ({inferred.reason})",
            )
        stages = inferred.stages
        pipeline = inferred.is_pipeline
        if _one_gpu_stages(inferred) and levels.signal != SIGNAL_SM:
            occ = busy_at_most_utilization(occ, kb)
    else:
        stages = topo.stages
        pipeline = topo.pp_size > 1
    health = gpu_health(recording, gpus)
    st = window_stats(
        grid, levels, occ_gpu=occ, stages=stages, health=health, options=opts, lags=lags
    )
    view = training_view(st, schedule, grid.t_s, levels, opts) if pipeline else None
    window = GpuWindow(grid.gpus, step, occ, kb, power, memory, float(grid.t_s[0]))
    working = inferred.groups if inferred is not None else topo.stages if topo else ()
    ctx = Context(
        stats=st,
        levels=levels,
        load=ctx_load,
        options=opts,
        topology_given=topo is not None,
        topology_confidence=1.0 if inferred is None else inferred.confidence,
        pipeline=pipeline,
        inferred=inferred,
        collective_wait=_collective_wait(grid, window, levels, opts),
        underfed=None
        if pipeline
        else underfed_finding(window, tuple(g for grp in working for g in grp), levels, opts),
        schedule=schedule,
        power_concurrency=_power_concurrency(grid, levels, stages),
        steps=None if view is None else view.steps,
        judgement=None if view is None else view.judgement,
        memory_used_b=_memory_used(window),
    )
    findings, load_limited = classify(ctx)
    primary = findings[0]
    if primary.verdict is Verdict.SERIALIZED and load_limited is None:
        load_limited = load_limited_for(ctx_load, in_flight(ctx).estimate, opts)
    evidence = _evidence(ctx, findings=findings, topo=topo, grid=grid)
    evidence.update(_shape_evidence(ctx, evidence, recording, len(gpus)))
    if view is not None:
        evidence.update(step_extras(view))
    return Diagnosis(
        verdict=primary.verdict,
        confidence=float(np.clip(primary.confidence, 0.0, 1.0)),
        findings=tuple(_clip(f) for f in findings),
        stages=_stage_stats(st, None if view is None else view.steps),
        window_s=st.duration_s,
        n_samples=n_samples,
        load_limited=load_limited,
        evidence=evidence,
    )


def _collective_wait(
    grid: Grid, window: GpuWindow, levels: Levels, opts: DetectOptions
) -> Finding | None:
    """The collective-wait finding, its waiting judged against the job's measured idle draw."""
    shared = job_idle_levels(levels)
    if shared is not levels:
        window = replace(window, occupancy=occupancy(grid, shared))
    return collective_wait_finding(window, shared, opts)


def _power_concurrency(
    grid: Grid, levels: Levels, stages: tuple[tuple[int, ...], ...]
) -> float | None:
    """Concurrency from power, where SM activity has only an assumed level and a known limit."""
    sources = levels.compute_level_source
    if levels.signal != SIGNAL_SM or not sources or any(x != LEVEL_ASSUMED for x in sources):
        return None
    if levels.power_reference_w is None or levels.compute_power_w is None:
        return None
    occ = occupancy(grid, replace(levels, signal=SIGNAL_POWER))
    row = {g: k for k, g in enumerate(grid.gpus)}
    per_stage = [np.nanmean(occ[[row[g] for g in st]]) for st in stages]
    total = float(np.nansum(per_stage))
    return total if np.isfinite(total) else None


def _has_power(s: object) -> bool:
    from bubblewatch.model.recording import GpuSeries

    assert isinstance(s, GpuSeries)
    return s.has(Metric.POWER_INSTANT_W) or s.has(Metric.POWER_AVG_W)


def _clip(f: Finding) -> Finding:
    return replace(f, confidence=float(np.clip(f.confidence, 0.0, 1.0)))


def _insufficient(
    reason: str,
    recording: Recording,
    n_samples: int,
    load: LoadContext,
    extra: dict[str, EvidenceValue],
) -> Diagnosis:
    evidence: dict[str, EvidenceValue] = dict.fromkeys(EVIDENCE_KEYS)
    evidence.update(
        {
            "reason": reason,
            "running_requests": load.running,
            "queued_requests": load.queued,
            "running_requests_source": running_source(load, None),
            "micro_batch_requests": load.micro_batch,
        }
    )
    evidence.update(extra)
    finding = Finding(Verdict.INSUFFICIENT_DATA, 1.0, reason, {"reason": reason, **extra})
    return Diagnosis(
        verdict=Verdict.INSUFFICIENT_DATA,
        confidence=1.0,
        findings=(finding,),
        stages=(),
        window_s=recording.duration_s,
        n_samples=n_samples,
        load_limited=None,
        evidence=evidence,
    )


def _f(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _opt(a: npt.NDArray[np.float64] | None, i: int) -> float | None:
    return None if a is None else _f(float(a[i]))


def _stage_stats(st: WindowStats, steps: Steps | None) -> tuple[StageStats, ...]:
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


def _evidence(
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
    turns = inferred is not None and _one_gpu_stages(inferred)
    ev.update(_range_evidence(grid, levels, st, ctx.options, turns=turns))
    return ev


def _one_gpu_stages(inferred: InferredTopology) -> bool:
    """An inferred pipeline of single GPUs (a layer split, or single GPUs that stagger): their
    turns may be shorter than power resolves (detect/level_range.py)."""
    return inferred.is_pipeline and all(len(g) == 1 for g in inferred.groups)


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


def _shape_evidence(
    ctx: Context, ev: dict[str, EvidenceValue], recording: Recording, n_gpus: int
) -> dict[str, EvidenceValue]:
    """The job's shape in words, how its GPUs were counted, its time waiting in collectives."""
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
        "gpu_count_note": gpu_count_note(recording.meta, n_gpus),
        "collective_wait_share_ratio": None if cw is None else cw.evidence["share_ratio"],
        "collective_wait_event_count": None if cw is None else cw.evidence["event_count"],
    }


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
