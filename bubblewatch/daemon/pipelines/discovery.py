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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bubblewatch.analysis.target import training_from_argv
from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.topology._tokenise import EngineArgsError
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.identity import node_identity
from bubblewatch.topology.single_process import SingleProcessJob

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
    # Where the configuration overrode the identity discovery found (logged on change).
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    """What the daemon is told of its pipelines' identity: unset fields are discovered."""

    pipeline_id: str = ""  # topology.pipeline_id
    first_stage: int | None = None  # topology.first_stage


def pipeline_id(
    topology: Topology | None,
    engine: EngineConfig | None,
    *,
    instance: str,
    configured: str = "",
    index: int = 0,
    count: int = 1,
) -> str:
    """The `pipeline` label: the configured id, else a multi-node engine's shared id, else
    `<instance>/<engine>[:<port>][/<id>]`."""
    if configured:
        return configured if count == 1 else f"{configured}/{index}"
    node = node_identity(engine) if engine is not None else None
    if node is not None and node.pipeline_id:
        # Alike on every node; discovery's own id adds the data-parallel replica, if any.
        own = topology.pipeline_id if topology is not None else ""
        return own if own.startswith(node.pipeline_id) else node.pipeline_id
    # A training job's `<framework>@<rendezvous address>` id is alike on every node.
    training = engine is not None and engine.training is not None
    if training and topology is not None and "@" in topology.pipeline_id:
        return topology.pipeline_id
    name = (engine.name if engine else None) or (topology.engine if topology else None) or "gpus"
    base = f"{instance or socket.gethostname()}/{name}"
    if engine is not None and engine.port is not None:
        base += f":{engine.port}"
    if topology is not None and topology.pipeline_id:
        own = topology.pipeline_id
        # Discovery names a pipeline `<engine>:<port>[/dpN]`: do not say it twice.
        engine_part = base.split("/", 1)[1]
        if own == engine_part:
            return base
        if own.startswith(engine_part + "/"):
            return base + own[len(engine_part) :]
        return f"{base}/{own}"
    return base if count == 1 else f"{base}/{index}"


def name_pipelines(
    found: Sequence[tuple[Topology | None, EngineConfig | None]],
    *,
    instance: str,
    configured: Identity = Identity(),
    metrics_urls: Sequence[str | None] = (),
) -> tuple[tuple[Pipeline, ...], tuple[str, ...]]:
    """The pipelines, each with its id and first stage (configured over discovered),
    and a line for each discovered identity the configuration overrode."""
    n = len(found)
    pipes: list[Pipeline] = []
    overrides: list[str] = []
    for i, (t, e) in enumerate(found):
        pid = pipeline_id(
            t, e, instance=instance, configured=configured.pipeline_id, index=i, count=n
        )
        node = node_identity(e) if e is not None else None
        first = node.first_stage if node is not None else 0
        if e is not None and e.training is not None and t is not None:
            first = e.training.first_stage_on(t.gpus)  # a training job's own numbering
        if configured.first_stage is not None:
            first = configured.first_stage
        pipes.append(Pipeline(pid, t, e, metrics_urls[i] if i < len(metrics_urls) else None, first))
        if node is None:
            continue
        if configured.pipeline_id and node.pipeline_id and node.pipeline_id != pid:
            overrides.append(
                f"pipeline id {pid!r} (configured) over {node.pipeline_id!r} "
                f"(discovered, node {node.node_rank} of {node.nnodes})"
            )
        if configured.first_stage is not None and configured.first_stage != node.first_stage:
            overrides.append(
                f"{pid}: first stage {configured.first_stage} (configured) over "
                f"{node.first_stage} (discovered, node {node.node_rank} "
                f"of {node.nnodes})"
            )
    return tuple(pipes), tuple(overrides)


def sim_pipelines(
    topologies: Sequence[Topology],
    argv: Sequence[str],
    *,
    instance: str,
    configured: Identity = Identity(),
) -> Lookup:
    """A simulated scenario's pipelines, with the engine parsed from its command line.

    A training pipeline's launch (torchrun with Megatron-LM's flags, ...) gives its layout,
    as live discovery does, so its pipelines are judged against their schedule. A job with
    no pipeline stays without an engine, analysed as one group.
    """
    try:
        engine = parse_engine_cmdline(argv, {}, where="simulated engine_argv")
    except EngineArgsError as e:
        engine = None
        log.warning("simulated engine command line not understood", extra={"kv": {"error": str(e)}})
    if engine is None and argv and topologies:
        engine = _sim_training(argv)
        lay = None if engine is None else engine.training
        if lay is not None and lay.pp != topologies[0].pp_size:
            engine = None  # a command line that does not describe the simulated pipeline
    found: list[tuple[Topology | None, EngineConfig | None]] = [(t, engine) for t in topologies]
    if not found:
        # A job with no pipeline (data parallel training): analyse every GPU as one.
        found = [(None, engine)]
    pipes, overrides = name_pipelines(found, instance=instance, configured=configured)
    return Lookup(pipes, "sim", overrides=overrides)


def _sim_training(argv: Sequence[str]) -> EngineConfig | None:
    """The training job a simulated launch command describes (no config files are read)."""
    try:
        return training_from_argv(argv, {}, where="simulated argv")
    except InputError as e:
        log.warning(
            "simulated training command line not understood", extra={"kv": {"error": str(e)}}
        )
        return None


def discover_pipelines(
    processes: Mapping[int, Sequence[int]],
    gpus: Sequence[GpuInfo],
    *,
    instance: str,
    configured: Identity = Identity(),
    static_file: str | None = None,
    links: InterconnectProbe | None = None,
    memory: Mapping[int, Mapping[int, int | None]] | None = None,
) -> Lookup:
    """Live discovery (engine processes on the GPUs), falling back to `static_file`.

    `memory` (GPU -> pid -> bytes, NVML's compute processes) places the layer blocks of
    a process that holds several GPUs.

    With `links`, each pipeline's stage-to-stage links are checked through NVML
    and its topology's `interconnect` set from them.
    """
    from bubblewatch.topology.discover import discover_topology
    from bubblewatch.topology.probe import probe_version

    result = discover_topology(
        processes, gpus, static_file=static_file, version_probe=probe_version
    )
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
    split = None
    if not found:
        # No engine seen: analyse every GPU as one pipeline; the detector infers the stages.
        found = [(None, None)]
        split = _single_process(processes, gpus, memory)
    pipes, overrides = name_pipelines(
        found,
        instance=instance,
        configured=configured,
        metrics_urls=[p.metrics_url for p in result.pipelines],
    )
    if split is not None:
        text, job = split
        pipes = tuple(replace(p, single_process=text, process=job) for p in pipes)
    return Lookup(pipes, result.method, tuple(result.warnings), overrides)


def _single_process(
    processes: Mapping[int, Sequence[int]],
    gpus: Sequence[GpuInfo],
    memory: Mapping[int, Mapping[int, int | None]] | None,
) -> tuple[str, SingleProcessJob | None] | None:
    """The processes that hold several GPUs and may split a model by layers, in words, and
    the one such process (None with several)."""
    from bubblewatch.topology.procfs import ProcFS
    from bubblewatch.topology.single_process import layer_placement, single_process_jobs

    uuids = {g.uuid: g.index for g in gpus if g.uuid}
    found = single_process_jobs(processes, ProcFS(), memory=memory, uuids=uuids)
    jobs = [j for j in found if j.layer_split]
    if not jobs:
        return None
    job = jobs[0] if len(jobs) == 1 else None
    placed = None if job is None else layer_placement(job)
    text = "; ".join(
        f"pid {j.pid} ({j.runtime}, split {j.split}) on GPUs {','.join(map(str, j.gpus))}"
        for j in jobs
    )
    kv: dict[str, object] = {"jobs": text}
    if placed is not None:
        kv |= {"layer_order": ",".join(map(str, placed.order)), "order_from": placed.source}
    log.info("one process holds several GPUs", extra={"kv": kv})
    return text, job


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
