"""The daemon's inputs: opening NVML or the simulator, and what only live GPUs offer besides."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from bubblewatch.daemon.config import DaemonConfig
from bubblewatch.daemon.engineload import EngineLoads
from bubblewatch.daemon.ring import capacity_for
from bubblewatch.daemon.simsource import SimSource
from bubblewatch.model.samples import LoadSample
from bubblewatch.sources.live import Source

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

log = logging.getLogger("bubblewatch.daemon")

# How often each engine's metrics endpoint is read (each read times out after 0.5 s).
ENGINE_LOAD_INTERVAL_S = 1.0


def open_source(cfg: DaemonConfig) -> Source | None:
    """The simulated scenario when `simulate` is set, else NVML; None (logged) without a GPU."""
    if cfg.simulate:
        return SimSource(
            cfg.simulate,
            interval_s=cfg.sampling.interval_s,
            loop_s=max(30.0, 2 * cfg.analysis.window_s),
            gpus=cfg.simulate_gpus,
        )
    from bubblewatch.sources.nvml import NvmlDriverNotFound, NvmlSource, SamplerConfig

    try:
        return NvmlSource.open(SamplerConfig(interval_s=cfg.sampling.interval_s))
    except NvmlDriverNotFound as e:
        log.error(
            "no NVIDIA driver or GPU found; run with --simulate SCENARIO to try "
            "bubblewatch without one",
            extra={"kv": {"error": str(e)}},
        )
        return None


def live_extras(
    cfg: DaemonConfig,
    source: Source,
    on_load: Callable[[str, LoadSample], None],
) -> tuple[EngineLoads, InterconnectProbe | None]:
    """Engine-load pollers (filled in by discovery) and, on NVML, the stage-link probe."""
    loads = EngineLoads(
        capacity=capacity_for(cfg.sampling.history_s, ENGINE_LOAD_INTERVAL_S),
        interval_s=ENGINE_LOAD_INTERVAL_S,
        on_sample=on_load,
    )
    nvml = getattr(source, "nvml", None)
    if nvml is None:
        return loads, None
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

    return loads, InterconnectProbe(nvml)


def set_interval(source: Source, interval_s: float) -> None:
    """Change a running source's sampling interval, whichever way the source takes it."""
    setter = getattr(source, "set_interval", None)
    if setter is not None:
        setter(interval_s)
        return
    config = getattr(source, "config", None)
    if config is not None and hasattr(config, "interval_s"):
        source.config = replace(config, interval_s=interval_s)  # type: ignore[attr-defined]


def nvml_processes(source: Source) -> dict[int, list[int]]:
    """GPU index -> PIDs of its compute processes, from NVML (empty where unavailable)."""
    return {gpu: list(pids) for gpu, pids in nvml_process_memory(source).items()}


def nvml_process_memory(source: Source) -> dict[int, dict[int, int | None]]:
    """GPU index -> {PID: bytes it holds there (None: not reported)} of its compute processes."""
    from bubblewatch.sources.nvml import NvmlError

    nvml = getattr(source, "nvml", None)
    out: dict[int, dict[int, int | None]] = {}
    if nvml is None:
        return out
    for info in source.gpus():
        try:
            h = nvml.handle(info.index)
            out[info.index] = dict(nvml.compute_processes(h))
        except NvmlError as e:
            log.info(
                "no process list",
                extra={
                    "kv": {"gpu": info.index, "error": str(e)},
                    "ratelimit_key": f"procs:{info.index}",
                },
            )
    return out
