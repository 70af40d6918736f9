"""The pipelines the daemon follows from one discovery to the next.

Each pipeline keeps its analyzer (rule hold times, bubble energy) while it is
rediscovered; an engine that restarts with new settings starts its analysis
window afresh and has the change judged (`ChangeWatch`). Every pipeline seen
is remembered as last seen, so a restart is noticed even when a rediscovery
ran while the engine was down (and its pipeline gone).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bubblewatch.daemon.analysis import Pipeline, PipelineAnalyzer
from bubblewatch.daemon.change import ChangeWatch, Settings
from bubblewatch.daemon.config import DaemonConfig
from bubblewatch.daemon.discovery import (
    Identity,
    Lookup,
    discover_pipelines,
    engine_changes,
    sim_pipelines,
)
from bubblewatch.daemon.simsource import SimSource
from bubblewatch.daemon.source import nvml_process_memory
from bubblewatch.rules.load_peak import DEFAULT_HORIZON_S
from bubblewatch.sources.live import Source

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

log = logging.getLogger("bubblewatch.daemon")

# After an engine restart with new settings, how long to wait for an informative verdict
# (the engine may still be loading its weights) before judging the change on any verdict.
CHANGE_SETTLE_S = 600.0


def look_up(cfg: DaemonConfig, source: Source, links: InterconnectProbe | None) -> Lookup:
    """The pipelines now: the simulated scenario's, or those discovered on the live GPUs."""
    # The configured pipeline id and first stage override what discovery derives.
    identity = Identity(cfg.topology.pipeline_id, cfg.topology.first_stage)
    if isinstance(source, SimSource):
        return sim_pipelines(
            source.topologies(),
            source.playback.engine_argv,
            instance=cfg.alerting.instance,
            configured=identity,
        )
    static = cfg.topology.static_file
    memory = nvml_process_memory(source)
    return discover_pipelines(
        {gpu: list(pids) for gpu, pids in memory.items()},
        source.gpus(),
        memory=memory,
        instance=cfg.alerting.instance,
        configured=identity,
        static_file=None if static is None else str(static),
        links=links,
    )


class PipelineTracker:
    """The current lookup, each pipeline's analyzer and since when its window is valid."""

    def __init__(self, peak_horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.peak_horizon_s = peak_horizon_s  # analysis.peak_horizon, for every analyzer
        self.lookup: Lookup | None = None
        self.known: dict[str, Pipeline] = {}
        self.analyzers: dict[str, PipelineAnalyzer] = {}
        # Unix time from which a pipeline's window may start (after a change or its arrival).
        self.valid_from: dict[str, float] = {}
        self.changes = ChangeWatch(keep_s=1.0, settle_s=CHANGE_SETTLE_S)

    def update(self, lookup: Lookup, now_wall: float, *, initial: bool = False) -> bool:
        """Take a new discovery; True when a pipeline came, went or changed its settings."""
        known = Lookup(tuple(self.known.values()), "known") if self.known else None
        changes = engine_changes(known, lookup)
        old_ids = {p.id for p in self.lookup.pipelines} if self.lookup else set()
        new_ids = {p.id for p in lookup.pipelines}
        for pid, diff in changes.items():
            log.warning(
                "engine restarted with new settings; analysis starts afresh",
                extra={"kv": {"pipeline": pid, **{k: f"{a}->{b}" for k, (a, b) in diff.items()}}},
            )
            self.valid_from[pid] = now_wall
            if pid in self.analyzers:
                self.analyzers[pid].reset_holds()
            if not self.changes.engine_changed(pid, now_wall, diff):
                log.info(
                    "no diagnosis from before the engine change to compare with",
                    extra={"kv": {"pipeline": pid}},
                )
        if initial or new_ids != old_ids:
            log.info(
                "pipelines",
                extra={
                    "kv": {
                        "method": lookup.method,
                        "pipelines": ",".join(sorted(new_ids)),
                        "warnings": len(lookup.warnings),
                    }
                },
            )
            for line in lookup.overrides:
                log.info("configuration overrides discovered pipeline identity",
                         extra={"kv": {"override": line}})  # fmt: skip
            for pid in new_ids - old_ids:
                if not initial:
                    self.valid_from[pid] = now_wall
        self.analyzers = {
            p.id: (
                replace_pipeline(self.analyzers[p.id], p)
                if p.id in self.analyzers
                else PipelineAnalyzer(p, peak_horizon_s=self.peak_horizon_s)
            )
            for p in lookup.pipelines
        }
        self.lookup = lookup
        self.known.update((p.id, p) for p in lookup.pipelines)
        return bool(changes) or new_ids != old_ids

    def live_changed(self, pipeline: str, now_wall: float, diff: Settings) -> bool:
        """A setting the running engine changed live: judged like a restart, a window later.

        The window starts afresh (a window mixing both settings judges neither) and
        rule hold times restart; False when there is no diagnosis to compare with.
        """
        self.valid_from[pipeline] = now_wall
        if pipeline in self.analyzers:
            self.analyzers[pipeline].reset_holds()
        return self.changes.engine_changed(pipeline, now_wall, diff)


def change_keep_s(cfg: DaemonConfig) -> float:
    """How old a diagnosis may be to serve as the before of an engine change.

    A restart is noticed up to one rediscovery interval late, and the engine
    may have been down (or its pipeline gone) for a while before: look back
    that far, plus one window and analysis interval, plus CHANGE_SETTLE_S.
    """
    return (
        CHANGE_SETTLE_S
        + cfg.topology.rediscover_interval_s
        + cfg.analysis.window_s
        + cfg.analysis.interval_s
    )


def replace_pipeline(analyzer: PipelineAnalyzer, pipeline: Pipeline) -> PipelineAnalyzer:
    """Keep an analyzer's state (hold times, energy) across rediscoveries of the same pipeline."""
    analyzer.pipeline = pipeline
    return analyzer


def set_peak_horizon(tracker: PipelineTracker, horizon_s: float) -> None:
    """analysis.peak_horizon for the analyzers to come and those running (a reload)."""
    tracker.peak_horizon_s = horizon_s
    for analyzer in tracker.analyzers.values():
        analyzer.set_peak_horizon(horizon_s)
