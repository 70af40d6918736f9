"""What the daemon shows of its analyses: the published state, the exporter snapshot, the status.

An analysis publishes one immutable `AnalysisState` (swapped whole); each
scrape builds an `ExporterSnapshot` from it and the sampler's latest values.
The functions here read what they are given and change nothing; they keep no state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import bubblewatch
from bubblewatch.daemon.loop.reloads import ReloadState
from bubblewatch.daemon.loop.sampling import SamplingChoice
from bubblewatch.daemon.loop.ticks import Sampler
from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineResult
from bubblewatch.daemon.pipelines.change import ChangeOutcome
from bubblewatch.daemon.sources.engineload import EngineLoads
from bubblewatch.daemon.sources.enginestate import EngineStates
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.model.samples import LoadSample
from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.sinks.alerts import AlertDispatcher
from bubblewatch.sinks.snapshot import (
    ActiveRecommendation,
    EngineLoadState,
    EngineSettingState,
    ExporterSnapshot,
    GpuState,
    Health,
    LiveChangeCount,
    PipelineChangeState,
    PipelineState,
    pipeline_state,
)


@dataclass(frozen=True)
class AnalysisState:
    """What the last analysis published; swapped whole, read by scrapes."""

    pipelines: tuple[PipelineState, ...] = ()
    recommendations: tuple[ActiveRecommendation, ...] = ()
    placement: Mapping[int, tuple[str, int | None]] = field(default_factory=dict)
    changes: tuple[PipelineChangeState, ...] = ()
    done: bool = False


def analysis_state(
    results: Sequence[PipelineResult],
    *,
    outcomes: Mapping[str, ChangeOutcome],
    first_stage: int | None = None,
) -> AnalysisState:
    """The state one analysis publishes, with global stage labels.

    Each pipeline's stages start at its own `first_stage`, or at `first_stage` when given.
    """

    def first(r: PipelineResult) -> int:
        return r.pipeline.first_stage if first_stage is None else first_stage

    pipes = tuple(
        _shift_stages(
            first(r),
            pipeline_state(
                r.pipeline.id,
                r.diagnosis,
                bubble_energy_joules_total=r.bubble_energy_joules_total,
                topology=r.pipeline.topology,
                engine=r.pipeline.engine,
            ),
        )
        for r in results
    )
    recs = tuple(
        ActiveRecommendation(r.pipeline.id, rec.rule, rec.severity.value)
        for r in results
        for rec in r.recommendations
    )
    placement: dict[int, tuple[str, int | None]] = {}
    for r in results:
        topo = r.pipeline.topology
        if topo is not None:
            for s, stage in enumerate(topo.stages):
                for g in stage:
                    placement[g] = (r.pipeline.id, first(r) + s)
    changes = tuple(
        PipelineChangeState(o.pipeline, o.changed_at_s, o.concurrency_ratio, o.borne_out)
        for r in results
        if (o := outcomes.get(r.pipeline.id)) is not None
    )
    return AnalysisState(pipes, recs, placement, changes, done=True)


def _shift_stages(first: int, state: PipelineState) -> PipelineState:
    if not first:
        return state
    return replace(state, stages=tuple(replace(s, stage=first + s.stage) for s in state.stages))


def status_text(results: Sequence[PipelineResult]) -> str:
    """The sd_notify STATUS= line: one pipeline's verdict, or a count per verdict."""
    if len(results) == 1:
        r = results[0]
        d = r.diagnosis
        return (
            f"{r.pipeline.id}: {d.verdict.value} ({d.confidence:.2f}); "
            f"{len(r.recommendations)} recommendation(s)"
        )
    counts: dict[str, int] = {}
    for r in results:
        counts[r.diagnosis.verdict.value] = counts.get(r.diagnosis.verdict.value, 0) + 1
    return f"{len(results)} pipelines: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def status_key(results: Sequence[PipelineResult]) -> tuple[object, ...]:
    """What must change for the diagnosis to be logged again: verdicts and firing rules."""
    return tuple(
        (r.pipeline.id, r.diagnosis.verdict.value, tuple(rec.rule for rec in r.recommendations))
        for r in results
    )


def engine_loads(
    pipelines: Sequence[Pipeline],
    loads: EngineLoads | None,
    sim_load: LoadSample | None,
    now_s: float,
) -> tuple[EngineLoadState, ...]:
    """Each pipeline's engine load at Unix time `now_s`: polled live, else the simulator's own."""
    if loads is not None:
        return tuple(
            EngineLoadState(p.id, last.running, last.queued)
            for p in pipelines
            if (last := loads.latest(p.id, now_s)) is not None
        )
    if sim_load is not None:
        return tuple(EngineLoadState(p.id, sim_load.running, sim_load.queued) for p in pipelines)
    return ()


def engine_settings(
    pipelines: Sequence[Pipeline], states: EngineStates | None, now_s: float | None = None
) -> tuple[EngineSettingState, ...]:
    """The cap, limit and depth the rules see for each pipeline's engine, and their source."""
    out: list[EngineSettingState] = []
    for p in pipelines:
        if p.engine is None or p.engine.training is not None:
            continue
        facts = engine_facts(p.engine, None if states is None else states.latest(p.id, now_s))
        for name, source in sorted(facts["settings_source"].items()):
            v = facts.get(name)
            if isinstance(v, int) and not isinstance(v, bool):
                out.append(EngineSettingState(p.id, name, source, float(v)))
    return tuple(out)


def live_change_counts(states: EngineStates | None) -> tuple[LiveChangeCount, ...]:
    if states is None:
        return ()
    return tuple(LiveChangeCount(*k, n) for k, n in sorted(states.counts().items()))


def build_snapshot(
    state: AnalysisState,
    source: DaemonSource,
    sampler: Sampler,
    dispatcher: AlertDispatcher,
    loads: tuple[EngineLoadState, ...],
    *,
    analysis_duration_s: float | None,
    config_reload: ReloadState,
    sampling: SamplingChoice | None = None,
    engine_settings: tuple[EngineSettingState, ...] = (),
    live_changes: tuple[LiveChangeCount, ...] = (),
) -> ExporterSnapshot:
    """The exporter's view at scrape time (before the first poll: no readings, no samples)."""
    latest = sampler.latest()
    placement = state.placement or {}
    gpus = tuple(
        GpuState(info, latest.get(info.index, {}), *placement.get(info.index, ("", None)))
        for info in source.gpus()
    )
    stats = sampler.stats()
    health = Health(
        last_sample_timestamp_s=stats.last_sample_wall_s,
        sampling_duration_s=stats.last_poll_duration_s,
        analysis_duration_s=analysis_duration_s,
        nvml_errors=source.error_counts(),
        config_reload_ok=config_reload.ok,
        config_reload_timestamp_s=config_reload.success_timestamp_s,
        config_reloads=dict(config_reload.counts),
        config_restart_required=config_reload.restart_required,
        samples_total=stats.samples,
        sampling_interval_s=sampling.interval_s if sampling else None,
        sampling_interval_reason=sampling.reason if sampling else "",
    )
    return ExporterSnapshot(
        gpus,
        state.pipelines,
        state.recommendations,
        tuple(dispatcher.stats()),
        health,
        bubblewatch.__version__,
        loads,
        state.changes,
        engine_settings,
        live_changes,
        dispatcher.state_saved,
    )
