"""The daemon's work in one pass of its loop: events, discovery, analysis, and what scrapes see.

The main thread drains the sampler's events, re-discovers the pipelines when
due (and at once after a simulated scenario change), analyses every
pipeline's last window, publishes the result, sends alerts and asks for a
sampling burst where the verdict is unsure. `snapshot` (run on the HTTP
server's threads) builds the exporter's view from the last published state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.loop.alerting import send_alerts
from bubblewatch.daemon.loop.lookup import look_up
from bubblewatch.daemon.loop.publish import (
    analysis_state,
    build_snapshot,
    engine_loads,
    engine_settings,
    live_change_counts,
    status_key,
    status_text,
)
from bubblewatch.daemon.loop.sampling import apply_sampling
from bubblewatch.daemon.loop.state import DaemonState
from bubblewatch.daemon.loop.windows import analyze_pipelines, unsure
from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineResult
from bubblewatch.daemon.sources.enginestate import LiveChange
from bubblewatch.model.samples import Event, LoadSample
from bubblewatch.sinks.snapshot import EngineLoadState, ExporterSnapshot

log = logging.getLogger("bubblewatch.daemon")


class TickWork(DaemonState):
    """Each pass's work on the daemon's state; `Daemon._loop` says when."""

    def _on_load(self, pipeline: str, sample: LoadSample) -> None:
        # On a poller thread. The trace holds the first pipeline's load, as it holds its topology.
        lookup, recorder = self.pipelines.lookup, self.recorder
        if recorder is not None and lookup is not None and lookup.pipelines[0].id == pipeline:
            recorder.add_load(sample)

    def _on_events(self, events: list[Event]) -> None:
        # Runs in the sampler thread; the main loop drains.
        with self._events_lock:
            self._events.extend(events)
        self.wake.nudge()

    def _drain_events(self) -> None:
        with self._events_lock:
            events, self._events = self._events, []
        if not events:
            return
        if self.recorder is not None:
            self.recorder.events(events)
        for e in events:
            if e.kind == "scenario_change":
                self._discovery.now(self.clock.monotonic())
            elif e.kind in ("gpu_lost", "gpu_recovered"):
                self.ring.set_gpus(self.source.gpus())
                if self.recorder is not None:
                    self.recorder.set_gpus(self.source.gpus())

    # -- discovery --
    def _rediscover(self, now_wall: float, *, initial: bool = False) -> None:
        lookup = look_up(self.cfg, self.source, self._links)
        changed = self.pipelines.update(lookup, now_wall, initial=initial)
        if changed and self.recorder is not None:
            self.recorder.topology(now_wall, lookup.pipelines[0].topology)
        if self.loads is not None:
            self.loads.update(lookup.pipelines)
        if self.states is not None:
            self.states.update(lookup.pipelines)  # read back at once: every rediscovery
        self._set_sampling(self.cfg)

    def _set_sampling(self, cfg: DaemonConfig) -> None:
        lookup = self.pipelines.lookup
        pipes = lookup.pipelines if lookup is not None else ()
        self.sampling = apply_sampling(self.sampling, cfg, pipes, self.source, self.ring)

    # -- analysis --
    def _analyze(self, now_wall: float) -> None:
        t0 = time.perf_counter()
        end = self.ring.last_t()
        if end is None:
            return
        window_s = self.cfg.analysis.window_s
        if self.states is not None:
            for change in self.states.take_changes():
                self._live_changed(change)
        results = analyze_pipelines(
            self.ring,
            self.pipelines,
            self.loads,
            self.rules,
            now_wall,
            end=end,
            window_s=window_s,
            gpus=self.source.gpus(),
            states=self.states,
        )
        self._publish(results)
        # Alerts restored from before a restart are resolved only on a full window's evidence.
        send_alerts(
            self.dispatcher,
            results,
            now_wall,
            instance=self.cfg.alerting.instance,
            settled=end - self._sampling_since_s >= window_s,
        )
        self._set_status(results)
        self._maybe_burst(results)
        if self.recorder is not None:
            self.recorder.flush()
        self._analysis_s = time.perf_counter() - t0

    def _live_changed(self, change: LiveChange) -> None:
        """An engine setting changed live: log it, record it, compare the windows around it."""
        level = logging.WARNING if change.result.status == "refused" else logging.INFO
        log.log(level, "engine setting changed live", extra={"kv": change.log_fields()})
        detail = {"pipeline": change.pipeline, "result": change.result.status,
                  "settings": {k: [a, b] for k, (a, b) in change.settings.items()}}  # fmt: skip
        if self.recorder is not None:
            self.recorder.events([Event(change.t_s, "engine_setting_change", detail=detail)])
        if not self.pipelines.live_changed(change.pipeline, change.t_s, change.settings):
            log.info(
                "no diagnosis from before the live change to compare with",
                extra={"kv": {"pipeline": change.pipeline}},
            )

    def _publish(self, results: Sequence[PipelineResult]) -> None:
        # Stage labels are global: each pipeline's stages here start at its first_stage
        # (topology.first_stage, else discovered from a multi-node engine's flags).
        self._state = analysis_state(results, outcomes=self.pipelines.changes.outcomes())

    def _set_status(self, results: Sequence[PipelineResult]) -> None:
        text = status_text(results)
        if text != self._status:
            self._status = text
            self.notifier.status(text + self.reloads.state.status_note())
        key = status_key(results)
        if key != self._status_key:  # log changes, not every window
            self._status_key = key
            log.info("diagnosis", extra={"kv": {"status": text}})

    def _maybe_burst(self, results: Sequence[PipelineResult]) -> None:
        if unsure(results):
            self.source.burst(self.clock.monotonic() + self.cfg.analysis.interval_s)

    # -- the exporter's view, built at scrape time --
    def snapshot(self) -> ExporterSnapshot:
        return build_snapshot(
            self._state,
            self.source,
            self.sampler,
            self.dispatcher,
            self._engine_loads(),
            analysis_duration_s=self._analysis_s,
            config_reload=self.reloads.state,
            sampling=self.sampling,
            engine_settings=engine_settings(self._pipes(), self.states, self.clock.time()),
            live_changes=live_change_counts(self.states),
        )

    def _pipes(self) -> tuple[Pipeline, ...]:
        lookup = self.pipelines.lookup
        return () if lookup is None else lookup.pipelines

    def _engine_loads(self) -> tuple[EngineLoadState, ...]:
        """Each pipeline's engine load now: polled live, or the simulator's own."""
        lookup = self.pipelines.lookup
        if lookup is None:
            return ()
        sim = self.ring.last_load() if self.source.simulated else None
        return engine_loads(lookup.pipelines, self.loads, sim, self.clock.time())
