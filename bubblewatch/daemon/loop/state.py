"""What one `bubblewatch run` process holds: the parts the loop's rooms share.

`Daemon` (`run.py`: opening, the loop) is built from the rooms beside this
one, each a class over this state: `work.TickWork` (the work of one pass:
events, discovery, analysis, the exporter's view), `sighup.ConfigReload`
(applying a reloaded configuration) and `stopping.Shutdown` (closing it all
down). Declarations only; `Daemon.__init__` sets every one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.http.server import MetricsServer
from bubblewatch.daemon.loop.publish import AnalysisState
from bubblewatch.daemon.loop.reloads import ReloadLedger
from bubblewatch.daemon.loop.sampling import SamplingChoice
from bubblewatch.daemon.loop.ticks import Clock, Every, Heartbeat, Sampler, Wakeup
from bubblewatch.daemon.pipelines.tracker import PipelineTracker
from bubblewatch.daemon.record.recorder import TraceRecorder
from bubblewatch.daemon.ring import RingBuffer
from bubblewatch.daemon.sdnotify import SdNotifier
from bubblewatch.daemon.sources.engineload import EngineLoads
from bubblewatch.daemon.sources.enginestate import EngineStates
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.model.samples import Event
from bubblewatch.rules import RuleEngine
from bubblewatch.sinks.alerts import AlertDispatcher

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

# How long stopping (or a reload that drops a receiver) waits for alerts in flight.
SHUTDOWN_ALERT_TIMEOUT_S = 2.0


class DaemonState:
    """The parts of a running daemon, declared once for the rooms that use them."""

    # What it was opened from: a reload reads the same file, flags and environment again.
    _path: Path | None
    _overrides: dict[str, str]
    _env: Mapping[str, str] | None
    cfg: DaemonConfig
    rules: RuleEngine
    source: DaemonSource
    clock: Clock
    # The last reload's outcome, and the state scrapes and sd_notify see.
    reloads: ReloadLedger
    _state: AnalysisState
    _analysis_s: float | None
    _sampling_since_s: float  # Unix time sampling started
    _status: str
    _status_key: tuple[object, ...]
    # Events the sampler thread hands over; the main loop drains them.
    _events: list[Event]
    _events_lock: threading.Lock
    pipelines: PipelineTracker
    sampling: SamplingChoice | None
    recorder: TraceRecorder | None
    # Live GPUs only: the engines' load (the simulator brings its own) and settings read
    # back from them (SGLang /server_info); the stage links where the source probes them.
    loads: EngineLoads | None
    states: EngineStates | None
    _links: InterconnectProbe | None
    ring: RingBuffer
    notifier: SdNotifier
    dispatcher: AlertDispatcher
    wake: Wakeup
    heartbeat: Heartbeat
    _analysis: Every
    _discovery: Every
    server: MetricsServer
    sampler: Sampler
