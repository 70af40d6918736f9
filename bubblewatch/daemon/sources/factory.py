"""The daemon's inputs: opening NVML or the simulator, and the engine-load pollers of live GPUs."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.ring import capacity_for
from bubblewatch.daemon.sources.engineload import EngineLoads
from bubblewatch.daemon.sources.nvmlsource import NvmlDaemonSource
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.daemon.sources.simsource import SimSource
from bubblewatch.model.samples import LoadSample

log = logging.getLogger("bubblewatch.daemon")

# How often each engine's metrics endpoint is read (each read times out after 0.5 s).
ENGINE_LOAD_INTERVAL_S = 1.0


def open_source(
    cfg: DaemonConfig, *, wall_clock: Callable[[], float] = time.time
) -> DaemonSource | None:
    """The simulated scenario when `simulate` is set, else NVML; None (logged) without a GPU."""
    if cfg.simulate:
        return SimSource(
            cfg.simulate,
            interval_s=cfg.sampling.interval_s,
            loop_s=max(30.0, 2 * cfg.analysis.window_s),
            gpus=cfg.simulate_gpus,
            wall_clock=wall_clock,
        )
    from bubblewatch.sources.nvml import NvmlDriverNotFound, NvmlSource, SamplerConfig

    try:
        nvml = NvmlSource.open(
            SamplerConfig(interval_s=cfg.sampling.interval_s), wall_clock=wall_clock
        )
    except NvmlDriverNotFound as e:
        log.error(
            "no NVIDIA driver or GPU found; run with --simulate SCENARIO to try "
            "bubblewatch without one",
            extra={"kv": {"error": str(e)}},
        )
        return None
    return NvmlDaemonSource(nvml)


def open_engine_loads(cfg: DaemonConfig, on_load: Callable[[str, LoadSample], None]) -> EngineLoads:
    """Engine-load pollers for live GPUs (discovery fills in which engines to read)."""
    return EngineLoads(
        capacity=capacity_for(cfg.sampling.history_s, ENGINE_LOAD_INTERVAL_S),
        interval_s=ENGINE_LOAD_INTERVAL_S,
        on_sample=on_load,
    )
