"""`bubblewatch run`: the daemon's main loop, joining sampler, detector, rules and sinks.

Threads: the sampler (monotonic deadlines, ring buffer, watchdog pings), the
HTTP server (one thread per scrape), one alert-delivery worker per receiver.
The main thread sleeps until its next deadline or a signal and does
everything else in order: analysis every `analysis.interval` over the last
`analysis.window`, topology re-discovery every `topology.rediscover_interval`
(and at once after a simulated scenario change), SIGHUP reloads, SIGTERM.

The parts, in the order data flows: `daemon.sources` (opening the GPUs or
the simulator behind one `DaemonSource` protocol), `daemon.pipelines` (the
pipelines followed across rediscoveries), and beside this module `windows`
(an analysis round), `publish` (the state scrapes and sd_notify see),
`alerting`, and `reload` (the all-or-nothing check of a new configuration and
what it changes). A bad reload keeps the old state and sets
`bubblewatch_config_last_reload_successful` to 0. Every clock reading and
sleep goes through the injected `Clock` (tests/daemon/test_loop_in_process.py
runs the loop on a fake one).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.config.web import WebSettings
from bubblewatch.daemon.http.library import server_class
from bubblewatch.daemon.logging import configure_logging
from bubblewatch.daemon.loop.alerting import open_dispatcher, send_alerts
from bubblewatch.daemon.loop.lookup import look_up
from bubblewatch.daemon.loop.publish import (
    AnalysisState,
    analysis_state,
    build_snapshot,
    engine_loads,
    engine_settings,
    live_change_counts,
    status_key,
    status_text,
)
from bubblewatch.daemon.loop.reload import (
    Checked,
    ConfigDiff,
    apply_diff,
    check_reload,
    diff_configs,
    load_rule_engine,
    load_settings,
)
from bubblewatch.daemon.loop.reloads import ReloadLedger
from bubblewatch.daemon.loop.sampling import SamplingChoice, apply_sampling
from bubblewatch.daemon.loop.ticks import (
    Clock,
    Every,
    Heartbeat,
    Sampler,
    Sink,
    SystemClock,
    Wakeup,
)
from bubblewatch.daemon.loop.windows import analyze_pipelines, unsure
from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineResult
from bubblewatch.daemon.pipelines.tracker import PipelineTracker, change_keep_s, set_peak_horizon
from bubblewatch.daemon.record.recorder import TraceRecorder
from bubblewatch.daemon.record.stats import RecordCollector
from bubblewatch.daemon.ring import RingBuffer, buffer_capacity_for, capacity_for
from bubblewatch.daemon.sdnotify import SdNotifier
from bubblewatch.daemon.sources.engineload import EngineLoads
from bubblewatch.daemon.sources.enginestate import EngineStates, LiveChange
from bubblewatch.daemon.sources.factory import open_engine_loads, open_source
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.errors import InputError
from bubblewatch.model.samples import Event, LoadSample
from bubblewatch.rules import RuleEngine
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sinks.snapshot import EngineLoadState, ExporterSnapshot
from bubblewatch.sources.engine_state import engine_api_key

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

log = logging.getLogger("bubblewatch.daemon")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SHUTDOWN_ALERT_TIMEOUT_S = 2.0


class Daemon:
    """One `bubblewatch run` process: `open` reads the configuration and opens the GPUs,
    `run()` samples, analyses and serves until SIGTERM and returns the exit status.

    The source and the clock are passed in (`Daemon.open` picks NVML or the
    simulator and the host's clocks), so a test runs the whole loop in-process
    on a fake clock and a fake source.
    """

    @classmethod
    def open(
        cls,
        config_path: Path | None,
        overrides: Mapping[str, str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        source: DaemonSource | None = None,
    ) -> Daemon | None:
        """Read the configuration, rules and web config, open the source: None (logged)
        without a GPU; InputError (file, line, key) for a bad configuration."""
        overrides = dict(overrides or {})
        cfg, web = load_settings(config_path, overrides, env)
        configure_logging(
            cfg.log.level,
            cfg.log.format,
            env=env,
            ratelimit_interval_s=cfg.log.ratelimit_interval_s,
        )
        rules, _ = load_rule_engine(cfg)
        clock = clock or SystemClock()
        if source is None:
            source = open_source(cfg, wall_clock=clock.time)
        if source is None:
            return None
        return cls(
            cfg, web, rules, source, clock=clock, path=config_path, overrides=overrides, env=env
        )

    def __init__(
        self,
        cfg: DaemonConfig,
        web: WebSettings,
        rules: RuleEngine,
        source: DaemonSource,
        *,
        clock: Clock,
        path: Path | None = None,
        overrides: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Everything opened and discovered but nothing started; the daemon owns `source`."""
        self._path = path
        self._overrides = dict(overrides or {})
        self._env = env
        self.cfg = cfg
        self.rules = rules
        self.source = source
        self.clock = clock
        self.reloads = ReloadLedger(clock.time())
        self._state = AnalysisState()
        self._analysis_s: float | None = None
        self._sampling_since_s = math.inf  # Unix time sampling started
        self._status = ""
        self._status_key: tuple[object, ...] = ()
        self._events: list[Event] = []
        self._events_lock = threading.Lock()
        self.pipelines = PipelineTracker()
        self.pipelines.changes.keep_s = change_keep_s(cfg)
        set_peak_horizon(self.pipelines, cfg.analysis.peak_horizon_s)
        self.sampling: SamplingChoice | None = None
        self.recorder: TraceRecorder | None = None
        # Live GPUs only: the engines' load (the simulator brings its own) and settings read
        # back from them (SGLang /server_info); the stage links where the source probes them.
        self.loads: EngineLoads | None = None
        self.states: EngineStates | None = None
        self._links: InterconnectProbe | None = None
        self.ring = RingBuffer(
            capacity_for(cfg.sampling.history_s, cfg.sampling.interval_s),
            buffer_capacity=buffer_capacity_for(cfg.analysis.window_s),
        )
        self.ring.set_gpus(source.gpus())
        self.notifier = SdNotifier(env)
        self.dispatcher = open_dispatcher(cfg)
        self.wake = Wakeup()
        self.heartbeat = Heartbeat(clock=clock.monotonic)
        now = clock.monotonic()
        self._analysis = Every(cfg.analysis.interval_s, now + cfg.analysis.interval_s)
        self._discovery = Every(
            cfg.topology.rediscover_interval_s, now + cfg.topology.rediscover_interval_s
        )
        try:
            endpoint = server_class(os.environ if self._env is None else self._env)
        except ValueError as e:
            self._close_opened()
            raise InputError(str(e), path="BUBBLEWATCH_HTTP_SERVER") from None
        try:
            self.server = endpoint(
                cfg.web.listen_address,
                make_registry(self.snapshot),
                web=web,
                ready=lambda: self._state.done,
                telemetry_path=cfg.web.telemetry_path,
                max_requests=cfg.web.max_requests,
            )
        except OSError as e:
            self._close_opened()
            raise InputError(
                f"cannot listen on {cfg.web.listen_address}: {e.strerror or e}",
                path="web.listen_address",
            ) from None
        try:
            self._open_rest(env)
        except BaseException:
            self.server.close()
            self._close_opened()
            raise
        watchdog_s = self.notifier.watchdog_interval_s
        sinks: list[Sink] = [self.ring]
        if self.recorder is not None:
            sinks.append(self.recorder)
        self.sampler = Sampler(
            source,
            sinks,
            load=source,
            on_events=self._on_events,
            on_first_sample=self.wake.nudge,
            # The main loop beats at least once a second; half of WatchdogSec (3 s at
            # least) without a beat (a wedged analysis, discovery or reload) stops the pings.
            watchdog=self.heartbeat.gate(self.notifier.watchdog, max(3.0, (watchdog_s or 0) / 2)),
            watchdog_interval_s=watchdog_s,
            clock=clock.monotonic,
            sleep_until=clock.sleep_until,
        )

    def _open_rest(self, env: Mapping[str, str] | None) -> None:
        """Engine pollers on live GPUs, the first discovery, and the trace recorder."""
        cfg, source = self.cfg, self.source
        if not source.simulated:
            self.loads = open_engine_loads(cfg, self._on_load)
            self._links = source.interconnect()
            engine_key = engine_api_key(os.environ if env is None else env)
            self.states = EngineStates(interval_s=cfg.analysis.interval_s, api_key=engine_key)
        self._rediscover(self.clock.time(), initial=True)
        rc = cfg.record
        if rc.path is not None:
            topo = self.pipelines.lookup.pipelines[0].topology if self.pipelines.lookup else None
            self.recorder = TraceRecorder(
                rc.path,
                source.gpus(),
                topo,
                {"source": "bubblewatch run", "simulate": cfg.simulate},
                rotation=rc.rotation,
                clock=self.clock.monotonic,
                wall_clock=self.clock.time,
            )
            self.server.registry.register(RecordCollector(self.recorder))

    def close(self) -> None:
        """Close what opening the daemon opened, for a daemon that is not going to run."""
        self.server.close()
        self._close_opened()

    def _close_opened(self) -> None:
        for closer in (self.loads, self.states):
            if closer is not None:
                closer.close()
        if self.recorder is not None:
            self.recorder.close()
        self.dispatcher.close(SHUTDOWN_ALERT_TIMEOUT_S)
        self.wake.close()
        self.source.close()

    # -- start --
    def run(self) -> int:
        """Sample, analyse and serve until SIGTERM (0) or the sampler dies (1)."""
        self.wake.install_signals((signal.SIGHUP, *STOP_SIGNALS))
        cfg = self.cfg
        self.server.start()
        host, _, _ = cfg.web.listen_address.rpartition(":")
        log.info(
            "serving metrics",
            extra={
                "kv": {
                    "address": f"{host or '*'}:{self.server.port}",
                    "tls": self.server.tls,
                    "path": cfg.web.telemetry_path,
                    "max_requests": self.server.limits.max_requests,
                    "max_connections": self.server.limits.max_connections,
                }
            },
        )
        self._sampling_since_s = self.clock.time()
        self.sampler.start()
        try:
            return self._loop()
        finally:
            self._shutdown()

    def _on_load(self, pipeline: str, sample: LoadSample) -> None:
        # On a poller thread. The trace holds the first pipeline's load, as it holds its topology.
        lookup, recorder = self.pipelines.lookup, self.recorder
        if recorder is not None and lookup is not None and lookup.pipelines[0].id == pipeline:
            recorder.add_load(sample)

    # -- the main loop --
    def _loop(self) -> int:
        analysis, discovery, clock = self._analysis, self._discovery, self.clock
        ready_sent = False
        while True:
            self.heartbeat.beat()
            now = clock.monotonic()
            timeout = min(analysis.next_s, discovery.next_s, now + 1.0) - now
            sigs = clock.sleep(timeout, self.wake)
            self.heartbeat.beat()
            stop = [sig for sig in sigs if sig in STOP_SIGNALS]
            if stop:
                log.info("stopping", extra={"kv": {"signal": signal.Signals(stop[0]).name}})
                return 0
            if signal.SIGHUP in sigs:
                self._reload()
            if not ready_sent and self.sampler.stats().samples > 0:
                ready_sent = True
                self.notifier.ready(status="sampling; first diagnosis pending")
                log.info("ready", extra={"kv": {"gpus": len(self.source.gpus())}})
            if not self.sampler.alive:
                log.error("the sampling thread died; exiting so the service manager restarts us")
                return 1
            self._drain_events()
            now = clock.monotonic()
            try:
                if discovery.due(now):
                    self._rediscover(clock.time())
                if analysis.due(now):
                    self._analyze(clock.time())
            except Exception as e:  # a bad window must never take the daemon down
                log.error(
                    "analysis failed",
                    exc_info=True,
                    extra={
                        "kv": {"error": f"{type(e).__name__}: {e}"},
                        "ratelimit_key": f"analysis:{type(e).__name__}",
                    },
                )

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

    # -- SIGHUP --
    def _reload(self) -> None:
        self.notifier.reloading()
        log.info("reloading configuration", extra={"kv": {"file": str(self._path)}})
        try:
            new = check_reload(self._path, self._overrides, self._env, current=self.cfg)
        except InputError as e:  # logged and counted; everything stays as it was
            self.reloads.invalid(str(e))
        else:
            diff = self._apply(new)
            self.reloads.loaded(diff, new.cfg, self.clock.time(), rules=new.rule_count)
        self.notifier.ready(status=(self._status or "reloaded") + self.reloads.state.status_note())

    def _apply(self, new: Checked) -> ConfigDiff:
        diff = diff_configs(self.cfg, new.cfg, simulated=self.source.simulated)
        cfg = diff.cfg
        self.rules = new.rules  # one reference swap: the next analysis uses the new set
        self.server.set_web(new.web)
        self.dispatcher = apply_diff(
            diff,
            self.source,
            self.dispatcher,
            env=self._env,
            alert_timeout_s=SHUTDOWN_ALERT_TIMEOUT_S,
        )
        if diff.sampling or diff.ring:
            self._set_sampling(cfg)
        now = self.clock.monotonic()
        self._analysis.reschedule(cfg.analysis.interval_s, now)
        self._discovery.reschedule(cfg.topology.rediscover_interval_s, now)
        if diff.topology:
            self._discovery.now(now)
        self.pipelines.changes.keep_s = change_keep_s(cfg)
        set_peak_horizon(self.pipelines, cfg.analysis.peak_horizon_s)
        self.cfg = cfg
        return diff

    # -- SIGTERM --
    def _shutdown(self) -> None:
        self.notifier.stopping()
        if self.loads is not None:
            self.loads.close()
        if self.states is not None:
            self.states.close()
        self.sampler.stop()
        self.server.close()
        self.dispatcher.close(SHUTDOWN_ALERT_TIMEOUT_S)
        if self.recorder is not None:
            self.recorder.close()
        self.source.close()
        self.wake.close()
        st = self.sampler.stats()
        log.info(
            "stopped",
            extra={
                "kv": {
                    "polls": st.polls,
                    "samples": st.samples,
                    "source_cpu_s": f"{st.source_cpu_s:.4f}",
                    "simulate_cpu_s": f"{self.source.simulate_cpu_s:.4f}",
                    "ring_bytes": self.ring.stats().nbytes,
                }
            },
        )
        self.notifier.close()
