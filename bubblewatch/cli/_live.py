"""Shared by `record` and `diagnose`: open NVML, discover the topology, sample for a while.

Discovery also checks the links between stages (NVLink or PCIe) and finds the
engine's metrics endpoint; `EngineLoadFeed` reads running/queued requests from
it on its own thread, so a slow or dead endpoint never holds up sampling.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from bubblewatch.errors import InputError
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.engine_metrics import EngineLoadPoller, EngineMetricsReader
from bubblewatch.sources.engine_state import (
    EngineStateReader,
    LiveState,
    engine_api_key,
    state_paths,
)
from bubblewatch.sources.nvml import NvmlDriverNotFound, NvmlError, NvmlSource, SamplerConfig, run
from bubblewatch.sources.nvml.interconnect import Interconnect, InterconnectProbe
from bubblewatch.topology.endpoint import base_url
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.redact import redact_text

log = logging.getLogger("bubblewatch.cli")

NO_DRIVER_HINT = (
    "no NVIDIA driver or GPU found ({why}).\n"
    "bubblewatch needs NVML (libnvidia-ml.so.1, installed with the NVIDIA driver) on a GPU "
    "host.\nTo see what it does without one, try: bubblewatch diagnose --simulate pp8-serialized"
)


def add_sampling_args(p: Any, *, default_duration: float | None) -> None:
    p.add_argument(
        "--duration",
        type=float,
        default=default_duration,
        metavar="S",
        help="seconds to sample"
        + (f" (default {default_duration:g})" if default_duration else " (default: until Ctrl-C)"),
    )
    p.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help="base sample interval (default 1; a simulated training pipeline: 0.125, as the "
        "daemon samples one)",
    )
    p.add_argument(
        "--no-sample-buffers",
        action="store_true",
        help="do not read the driver's buffered power/utilisation samples",
    )
    p.add_argument(
        "--proc-root",
        default="/proc",
        metavar="DIR",
        help="the /proc tree in which to find the serving engine (default /proc)",
    )
    p.add_argument(
        "--no-engine-metrics",
        action="store_true",
        help="do not read the engine's metrics endpoint (running/queued requests) nor its "
        "live settings (SGLang /server_info)",
    )


def sampler_config(args: Any) -> SamplerConfig:
    if args.duration is not None and args.duration <= 0:
        raise InputError(f"must be > 0 seconds, got {args.duration:g}", path="--duration")
    interval = 1.0 if args.interval is None else args.interval
    if interval <= 0:
        raise InputError(f"must be > 0 seconds, got {interval:g}", path="--interval")
    return SamplerConfig(interval_s=interval, sample_buffers=not args.no_sample_buffers)


def open_nvml(config: SamplerConfig) -> NvmlSource | None:
    """An open source, or None once stderr says there is no driver or GPU."""
    try:
        return NvmlSource.open(config)
    except NvmlDriverNotFound as e:
        print(f"bubblewatch: {NO_DRIVER_HINT.format(why=e)}", file=sys.stderr)
        return None


@dataclass
class Discovery:
    topology: Topology | None
    method: str
    warnings: list[str] = field(default_factory=list)
    metrics_url: str | None = None
    interconnect: Interconnect = field(default_factory=Interconnect)
    training: dict[str, Any] | None = None  # a training job's layout (ParallelLayout.to_dict)
    engine_version: str | None = None
    engine: EngineConfig | None = None  # the first pipeline's engine (redacted)

    def meta(self) -> dict[str, Any]:
        """What a trace header's `meta` or a report says about the links, engine and job."""
        out: dict[str, Any] = {
            "interconnect": {
                "summary": self.interconnect.summary,
                "links": self.interconnect.to_dicts(),
            }
        }
        if self.training is not None:
            out["training"] = self.training
        if self.engine_version is not None:
            out["engine_version"] = self.engine_version
        return out


def discover(source: NvmlSource, proc_root: str = "/proc") -> Discovery:
    """The engine topology from NVML's processes and /proc, when discovery is available."""
    try:
        from bubblewatch.topology.discover import discover_topology
    except ImportError:
        return Discovery(None, "unavailable", ["topology discovery is not available"])
    processes: dict[int, list[int]] = {}
    for info in source.gpus():
        try:
            h = source.nvml.handle(info.index)
            processes[info.index] = [pid for pid, _ in source.nvml.compute_processes(h)]
        except NvmlError as e:
            log.info("GPU %d: no process list (%s)", info.index, e)
    from bubblewatch.topology.probe import probe_version

    result = discover_topology(processes, source.gpus(), proc_root, version_probe=probe_version)
    if len(result.pipelines) > 1:
        result_warnings = [*result.warnings, f"{len(result.pipelines)} pipelines; using the first"]
    else:
        result_warnings = list(result.warnings)
    if not result.pipelines:
        return Discovery(None, result.method, result_warnings)
    first = result.pipelines[0]
    topology, links = InterconnectProbe(source.nvml).apply(first.topology)
    lay = None if first.engine is None else first.engine.training
    return Discovery(
        topology,
        result.method,
        result_warnings,
        first.metrics_url,
        links,
        training=None if lay is None else lay.to_dict(),
        engine_version=None if first.engine is None else first.engine.version,
        engine=first.engine,
    )


class EngineLoadFeed:
    """The engine's running/queued requests, read on a background thread, drained by the caller.

    `drain()` never waits on the network: it swaps out what the poller thread
    has gathered. A dead or slow endpoint only means fewer (or no) samples.
    """

    def __init__(self, url: str, *, interval_s: float, timeout_s: float = 0.5) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._pending: list[LoadSample] = []
        self.samples = 0
        self.reader = EngineMetricsReader(url, timeout_s=timeout_s)
        self.poller = EngineLoadPoller(self.reader, interval_s=interval_s, on_sample=self._add)

    def _add(self, sample: LoadSample) -> None:
        with self._lock:
            self._pending.append(sample)

    def drain(self) -> list[LoadSample]:
        with self._lock:
            out, self._pending = self._pending, []
        self.samples += len(out)
        return out

    def start(self) -> EngineLoadFeed:
        self.poller.start()
        return self

    def stop(self) -> None:
        # Do not wait out a slow read: the thread is a daemon and its late result is dropped.
        self.poller.stop(timeout_s=0.2)

    def __enter__(self) -> EngineLoadFeed:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """For the trace summary and --json: where, how many samples, failures by kind."""
        return {
            "url": redact_text(self.url),
            "samples": self.samples,
            "reads": self.reader.reads,
            "failures": self.reader.failures,
            "last_error": self.poller.last_reason,
        }


def discover_with_feed(
    source: NvmlSource, args: Any, interval_s: float
) -> tuple[Discovery, EngineLoadFeed | None]:
    """What runs on this host (`discover`) and a feed for its engine's load, if it has one."""
    found = discover(source, args.proc_root)
    return found, engine_load_feed(args, found, interval_s)


def engine_load_feed(args: Any, found: Discovery, interval_s: float) -> EngineLoadFeed | None:
    """A feed for the discovered engine's metrics endpoint, unless there is none or it is off."""
    if getattr(args, "no_engine_metrics", False) or found.metrics_url is None:
        return None
    # Engine load moves at request timescales: no need to poll it faster than twice a second.
    return EngineLoadFeed(found.metrics_url, interval_s=max(interval_s, 0.5))


def read_engine_state(
    args: Any, engine: EngineConfig | None
) -> tuple[LiveState | None, dict[str, Any] | None]:
    """The engine's live settings, read once (SGLang /server_info), and what JSON says of them.

    Off with --no-engine-metrics; the key from BUBBLEWATCH_ENGINE_API_KEY(_FILE).
    """
    if getattr(args, "no_engine_metrics", False) or engine is None:
        return None, None
    url = base_url(engine)
    if url is None or not state_paths(engine.name, engine.version):
        return None, None
    key = engine_api_key(os.environ)
    reading = EngineStateReader(url, engine=engine.name, version=engine.version, api_key=key).read()
    if reading.state is None:
        return None, {"error": reading.reason}
    return reading.state, reading.state.to_dict()


def sample(
    source: NvmlSource,
    duration_s: float | None,
    on_samples: Callable[[list[Sample]], None],
    on_events: Callable[[list[Event]], None],
    *,
    progress: bool,
    load: EngineLoadFeed | None = None,
    on_load: Callable[[list[LoadSample]], None] | None = None,
) -> int:
    """Run the sampling loop, with a progress line on stderr when it is a terminal.

    With `load`, the engine's load samples gathered since the last tick go to `on_load`.
    """
    start = time.monotonic()
    count = 0

    def drain_load() -> None:
        if load is not None and on_load is not None:
            rows = load.drain()
            if rows:
                on_load(rows)

    def collect(rows: list[Sample]) -> None:
        nonlocal count
        count += len(rows)
        on_samples(rows)
        drain_load()
        if progress:
            elapsed = time.monotonic() - start
            total = f"/{duration_s:.0f}" if duration_s is not None else ""
            sys.stderr.write(f"\rsampling {len(source.gpus())} GPUs: {elapsed:5.1f}{total} s, ")
            sys.stderr.write(f"{count} samples ")
            latest = load.poller.latest() if load is not None else None
            if latest is not None:
                sys.stderr.write(f"| engine: {_num(latest.running)} running, ")
                sys.stderr.write(f"{_num(latest.queued)} queued ")
            sys.stderr.flush()

    try:
        if load is not None:
            load.start()
        run(source, duration_s=duration_s, on_samples=collect, on_events=on_events)
    except KeyboardInterrupt:
        pass  # stop sampling, keep what we have
    finally:
        if load is not None:
            load.stop()
            drain_load()
        if progress:
            sys.stderr.write("\n")
    return count


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:g}"
