"""The pipelines now, asked of the source: the simulator plays its own, live GPUs are discovered.

The loop's glue between `daemon.sources` and `daemon.pipelines` (neither
imports the other's way: the engine pollers of `sources` take pipelines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.pipelines.discovery import (
    Identity,
    Lookup,
    discover_pipelines,
    sim_pipelines,
)
from bubblewatch.daemon.sources.protocol import DaemonSource

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe


def look_up(cfg: DaemonConfig, source: DaemonSource, links: InterconnectProbe | None) -> Lookup:
    """The pipelines now: the simulated scenario's, or those discovered on the live GPUs."""
    # The configured pipeline id and first stage override what discovery derives.
    identity = Identity(cfg.topology.pipeline_id, cfg.topology.first_stage)
    played = source.played()
    if played is not None:
        return sim_pipelines(
            played.topologies,
            played.engine_argv,
            instance=cfg.alerting.instance,
            configured=identity,
        )
    static = cfg.topology.static_file
    memory = source.processes()
    return discover_pipelines(
        {gpu: list(pids) for gpu, pids in memory.items()},
        source.gpus(),
        memory=memory,
        instance=cfg.alerting.instance,
        configured=identity,
        static_file=None if static is None else str(static),
        links=links,
    )
