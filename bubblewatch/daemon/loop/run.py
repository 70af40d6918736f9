"""`bubblewatch run`: the daemon's main loop, joining sampler, detector, rules and sinks.

Threads: the sampler (monotonic deadlines, ring buffer, watchdog pings), the
HTTP server (one thread per scrape), one alert-delivery worker per receiver.
The main thread sleeps until its next deadline or a signal and does
everything else in order: analysis every `analysis.interval` over the last
`analysis.window`, topology re-discovery every `topology.rediscover_interval`
(and at once after a simulated scenario change), SIGHUP reloads, SIGTERM.

This module opens the daemon and runs its loop; the loop's rooms beside it
are each a class over the state `state.DaemonState` declares: `work` (a
pass's work: events, discovery, analysis, the exporter's view), `sighup`
(a reload applied) and `stopping` (closing down). The parts they use, in the
order data flows: `daemon.sources` (opening the GPUs or the simulator behind
one `DaemonSource` protocol), `daemon.pipelines` (the pipelines followed
across rediscoveries), and beside this module `windows` (an analysis round),
`publish` (the state scrapes and sd_notify see), `alerting`, and `reload`
(the all-or-nothing check of a new configuration and what it changes). Every
clock reading and sleep goes through the injected `Clock`
(tests/daemon/test_loop_in_process.py runs the loop on a fake one).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.config.web import WebSettings
from bubblewatch.daemon.http.library import server_class
from bubblewatch.daemon.logging import configure_logging
from bubblewatch.daemon.loop.alerting import open_dispatcher
from bubblewatch.daemon.loop.publish import AnalysisState
from bubblewatch.daemon.loop.reload import load_rule_engine, load_settings
from bubblewatch.daemon.loop.reloads import ReloadLedger
from bubblewatch.daemon.loop.sighup import ConfigReload
from bubblewatch.daemon.loop.stopping import Shutdown
from bubblewatch.daemon.loop.ticks import (
    Clock,
    Every,
    Heartbeat,
    Sampler,
    Sink,
    SystemClock,
    Wakeup,
)
from bubblewatch.daemon.pipelines.tracker import PipelineTracker, change_keep_s, set_peak_horizon
from bubblewatch.daemon.record.recorder import TraceRecorder
from bubblewatch.daemon.record.stats import RecordCollector
from bubblewatch.daemon.ring import RingBuffer, buffer_capacity_for, capacity_for
from bubblewatch.daemon.sdnotify import SdNotifier
from bubblewatch.daemon.sources.enginestate import EngineStates
from bubblewatch.daemon.sources.factory import open_engine_loads, open_source
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.errors import InputError
from bubblewatch.rules import RuleEngine
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sources.engine_state import engine_api_key

log = logging.getLogger("bubblewatch.daemon")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Daemon(ConfigReload, Shutdown):
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
        self._sampling_since_s = math.inf
        self._status = ""
        self._status_key = ()
        self._events = []
        self._events_lock = threading.Lock()
        self.pipelines = PipelineTracker()
        self.pipelines.changes.keep_s = change_keep_s(cfg)
        set_peak_horizon(self.pipelines, cfg.analysis.peak_horizon_s)
        self.sampling = None
        self.recorder = None
        self.loads = None
        self.states = None
        self._links = None
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
