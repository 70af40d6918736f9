"""Which pipelines run on this host, looked up again periodically, and what changed.

`discover_pipelines` asks NVML which processes use which GPU and reads their
command lines (bubblewatch.topology.discover_topology), or takes a static
topology file; `sim_pipelines` reads them off a simulated scenario.
`engine_changes` compares two lookups so the daemon notices an engine that
restarted with new flags. Only parsed settings are compared or logged, never
argv or environment (they may carry API keys).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bubblewatch.daemon.analysis import Pipeline
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.topology.cmdline import EngineArgsError, parse_engine_cmdline
from bubblewatch.topology.engine import EngineConfig

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

log = logging.getLogger("bubblewatch.discovery")

# EngineConfig fields that shape the pipeline; a change in any of them is an engine restart.
SETTINGS = (
    "name",
    "version",
    "pp_size",
    "tp_size",
    "ep_size",
    "dp_size",
    "pp_async_batch_depth",
    "pp_max_micro_batch_size",
    "cuda_graph",
    "cudagraph_mode",
    "max_running_requests",
    "layer_partition",
    "port",
)


@dataclass(frozen=True)
class Lookup:
    """One discovery: the pipelines found, how, and what could not be done."""

    pipelines: tuple[Pipeline, ...]
    method: str
    warnings: tuple[str, ...] = ()


def pipeline_id(
    topology: Topology | None,
    engine: EngineConfig | None,
    *,
    instance: str,
    configured: str = "",
    index: int = 0,
    count: int = 1,
) -> str:
    """The `pipeline` label: the configured id, else `<instance>/<engine>[:<port>][/<id>]`."""
    if configured:
        return configured if count == 1 else f"{configured}/{index}"
    name = (engine.name if engine else None) or (topology.engine if topology else None) or "gpus"
    base = f"{instance or socket.gethostname()}/{name}"
    if engine is not None and engine.port is not None:
        base += f":{engine.port}"
    if topology is not None and topology.pipeline_id:
        return f"{base}/{topology.pipeline_id}"
    return base if count == 1 else f"{base}/{index}"


def name_pipelines(
    found: Sequence[tuple[Topology | None, EngineConfig | None]],
    *,
    instance: str,
    configured: str = "",
    metrics_urls: Sequence[str | None] = (),
) -> tuple[Pipeline, ...]:
    n = len(found)
    return tuple(
        Pipeline(
            pipeline_id(t, e, instance=instance, configured=configured, index=i, count=n),
            t,
            e,
            metrics_urls[i] if i < len(metrics_urls) else None,
        )
        for i, (t, e) in enumerate(found)
    )


def sim_pipelines(
    topologies: Sequence[Topology], argv: Sequence[str], *, instance: str, configured: str = ""
) -> Lookup:
    """A simulated scenario's pipelines, with the engine parsed from its command line."""
    try:
        engine = parse_engine_cmdline(argv, {}, where="simulated engine_argv")
    except EngineArgsError as e:
        engine = None
        log.warning("simulated engine command line not understood", extra={"kv": {"error": str(e)}})
    found: list[tuple[Topology | None, EngineConfig | None]] = [(t, engine) for t in topologies]
    return Lookup(name_pipelines(found, instance=instance, configured=configured), "sim")


def discover_pipelines(
    processes: Mapping[int, Sequence[int]],
    gpus: Sequence[GpuInfo],
    *,
    instance: str,
    configured: str = "",
    static_file: str | None = None,
    links: InterconnectProbe | None = None,
) -> Lookup:
    """Live discovery (engine processes on the GPUs), falling back to `static_file`.

    With `links`, each pipeline's stage-to-stage links are checked through NVML
    and its topology's `interconnect` set from them.
    """
    from bubblewatch.topology.discover import discover_topology

    result = discover_topology(processes, gpus, static_file=static_file)
    found: list[tuple[Topology | None, EngineConfig | None]] = []
    for p in result.pipelines:
        topo = p.topology
        if links is not None:
            topo, checked = links.apply(topo)
            for link in checked.links:
                log.debug(
                    "stage link",
                    extra={"kv": {"pipeline": topo.pipeline_id, "link": link.describe()}},
                )
        found.append((topo, p.engine))
    if not found:
        # No engine seen: analyse every GPU as one pipeline; the detector infers the stages.
        found = [(None, None)]
    return Lookup(
        name_pipelines(
            found,
            instance=instance,
            configured=configured,
            metrics_urls=[p.metrics_url for p in result.pipelines],
        ),
        result.method,
        tuple(result.warnings),
    )


def settings(engine: EngineConfig | None) -> dict[str, object]:
    if engine is None:
        return {}
    d = engine.to_dict()
    return {k: d.get(k) for k in SETTINGS}


def engine_changes(old: Lookup | None, new: Lookup) -> dict[str, dict[str, tuple[object, object]]]:
    """{pipeline id: {setting: (old, new)}} for pipelines whose settings or stages changed."""
    if old is None:
        return {}
    before = {p.id: p for p in old.pipelines}
    out: dict[str, dict[str, tuple[object, object]]] = {}
    for p in new.pipelines:
        prev = before.get(p.id)
        if prev is None:
            continue
        a, b = settings(prev.engine), settings(p.engine)
        diff = {k: (a.get(k), b.get(k)) for k in SETTINGS if a.get(k) != b.get(k)}
        old_stages = prev.topology.stages if prev.topology else None
        new_stages = p.topology.stages if p.topology else None
        if old_stages != new_stages:
            diff["stages"] = (old_stages, new_stages)
        if diff:
            out[p.id] = diff
    return out
