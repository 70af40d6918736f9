"""Shared by `record` and `diagnose`: open NVML, discover the topology, sample for a while."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bubblewatch.model.samples import Event, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.nvml import NvmlDriverNotFound, NvmlError, NvmlSource, SamplerConfig, run

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
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="base sample interval")
    p.add_argument(
        "--no-sample-buffers",
        action="store_true",
        help="do not read the driver's buffered power/utilisation samples",
    )


def sampler_config(args: Any) -> SamplerConfig:
    if args.duration is not None and args.duration <= 0:
        raise InputError(f"must be > 0 seconds, got {args.duration:g}", path="--duration")
    if args.interval <= 0:
        raise InputError(f"must be > 0 seconds, got {args.interval:g}", path="--interval")
    return SamplerConfig(interval_s=args.interval, sample_buffers=not args.no_sample_buffers)


def open_nvml(config: SamplerConfig) -> NvmlSource | str:
    """An open source, or the message to print when there is no driver or GPU."""
    try:
        return NvmlSource.open(config)
    except NvmlDriverNotFound as e:
        return NO_DRIVER_HINT.format(why=e)


@dataclass
class Discovery:
    topology: Topology | None
    method: str
    warnings: list[str] = field(default_factory=list)


def discover(source: NvmlSource) -> Discovery:
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
    result = discover_topology(processes, source.gpus())
    if len(result.pipelines) > 1:
        result_warnings = [*result.warnings, f"{len(result.pipelines)} pipelines; using the first"]
    else:
        result_warnings = list(result.warnings)
    return Discovery(result.topology, result.method, result_warnings)


def sample(
    source: NvmlSource,
    duration_s: float | None,
    on_samples: Callable[[list[Sample]], None],
    on_events: Callable[[list[Event]], None],
    *,
    progress: bool,
) -> int:
    """Run the sampling loop, with a progress line on stderr when it is a terminal."""
    start = time.monotonic()
    count = 0

    def collect(rows: list[Sample]) -> None:
        nonlocal count
        count += len(rows)
        on_samples(rows)
        if progress:
            elapsed = time.monotonic() - start
            total = f"/{duration_s:.0f}" if duration_s is not None else ""
            sys.stderr.write(f"\rsampling {len(source.gpus())} GPUs: {elapsed:5.1f}{total} s, ")
            sys.stderr.write(f"{count} samples ")
            sys.stderr.flush()

    try:
        run(source, duration_s=duration_s, on_samples=collect, on_events=on_events)
    except KeyboardInterrupt:
        pass  # stop sampling, keep what we have
    finally:
        if progress:
            sys.stderr.write("\n")
    return count
