"""`diagnose`: one telemetry window plus topology to a Diagnosis with verdicts and evidence.

The verdict's assembly: the window's checks (too few samples, GPUs without
data), the grid, levels and statistics, the Context the classifier reads.
The window's further measurements come from `detect.measures`, the evidence's
rounded values from `detect.evidence`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.classify import classify
from bubblewatch.detect.context import Context, in_flight, running_source
from bubblewatch.detect.context import load_limited as load_limited_for
from bubblewatch.detect.evidence import shape_evidence, stage_stats, window_evidence
from bubblewatch.detect.grid import resample, sampling_interval_s
from bubblewatch.detect.health import gpu_health
from bubblewatch.detect.infer import InferredTopology, infer_topology
from bubblewatch.detect.jobs import GpuWindow, underfed_finding
from bubblewatch.detect.lag import LagMemo
from bubblewatch.detect.level_range import busy_at_most_utilization
from bubblewatch.detect.levels import (
    SIGNAL_SM,
    learn_levels,
    occupancy,
    power_average_by_gpu,
    power_metric,
)
from bubblewatch.detect.measures import (
    collective_wait,
    memory_used,
    one_gpu_stages,
    power_concurrency,
)
from bubblewatch.detect.stats import window_stats
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.training import step_extras, training_view
from bubblewatch.detect.types import (
    EVIDENCE_KEYS,
    Diagnosis,
    EvidenceValue,
    Finding,
    LoadContext,
    Verdict,
)
from bubblewatch.model.gpu_models import POWER_READING_INSTANT_S
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
    # Where a GPU's power reading is an instant (GA100 and older), the energy counter gives
    # its mean draw over the span SM activity covers (waiting.power_spanning_sm).
    instant = (power_average_by_gpu(recording, tuple(gpus)) == POWER_READING_INSTANT_S).any()
    metrics = (*_GRID_METRICS, Metric.ENERGY_J) if instant else _GRID_METRICS
    grid = resample(recording, gpus, metrics, step_s=step, max_gap_steps=opts.max_gap_steps)
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
        if one_gpu_stages(inferred) and levels.signal != SIGNAL_SM:
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
        collective_wait=collective_wait(grid, window, levels, opts),
        underfed=None
        if pipeline
        else underfed_finding(window, tuple(g for grp in working for g in grp), levels, opts),
        schedule=schedule,
        power_concurrency=power_concurrency(grid, levels, stages),
        steps=None if view is None else view.steps,
        judgement=None if view is None else view.judgement,
        memory_used_b=memory_used(window),
    )
    findings, load_limited = classify(ctx)
    primary = findings[0]
    if primary.verdict is Verdict.SERIALIZED and load_limited is None:
        load_limited = load_limited_for(ctx_load, in_flight(ctx).estimate, opts)
    evidence = window_evidence(ctx, findings=findings, topo=topo, grid=grid)
    evidence.update(shape_evidence(ctx, evidence, recording, gpus))
    if view is not None:
        evidence.update(step_extras(view))
    return Diagnosis(
        verdict=primary.verdict,
        confidence=float(np.clip(primary.confidence, 0.0, 1.0)),
        findings=tuple(_clip(f) for f in findings),
        stages=stage_stats(st, None if view is None else view.steps),
        window_s=st.duration_s,
        n_samples=n_samples,
        load_limited=load_limited,
        evidence=evidence,
    )


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
