"""Place an engine's ranks on GPUs: one Topology per data-parallel replica it runs here.

The engine's flags and CUDA_VISIBLE_DEVICES give the computed placement
(bubblewatch.topology.gpumap); what NVML observes and the ranks in process
titles check it, and every disagreement becomes a warning. Titles win over
flags when they cover every stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bubblewatch import engines
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.topology._proctree import TitleRanks
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.gpumap import GpuMapError, device_list, map_gpus, visible_devices
from bubblewatch.topology.identity import node_identity


def place(
    config: EngineConfig,
    pid: int | None,
    gpus: Sequence[GpuInfo],
    warnings: list[str],
    *,
    observed: set[int],
    titles: Mapping[int, TitleRanks],
    method: str,
) -> list[Topology]:
    """Map an engine's ranks to GPUs, one Topology per data-parallel replica it runs here."""
    who = f"{config.name}" + (f" (pid {pid})" if pid is not None else "")
    listed = device_list(config)
    vis = visible_devices(listed, gpus, device_order=config.env.get("CUDA_DEVICE_ORDER"))
    warnings.extend(f"{who}: {w}" for w in vis.warnings)
    replicas = config.dp_size
    engine = engines.get(config.name)
    if engines.placement_of(config.name).dp_inside_tp(config.flags, config.attn_dp_size):
        replicas = 1  # DP attention runs inside the one TP group
    if config.executor_backend == "ray":
        warnings.append(
            f"{who}: Ray assigns the GPUs (--distributed-executor-backend ray): rank order "
            "is assumed; process titles, where present, check it"
        )
    for problem in config.problems:
        warnings.append(f"{who}: {problem}")
    node = node_identity(config)
    if node is not None:
        warnings.append(
            f"{who}: multi-node engine (node {node.node_rank} of {node.nnodes}): only this "
            f"node's stages are shown, numbered from 0; globally they start at stage "
            f"{node.first_stage}"
        )
        if node.pipeline_id is None:
            flag = (engine.command.rendezvous_flag if engine else None) or "rendezvous address"
            warnings.append(
                f"{who}: no {flag} in its flags, so no pipeline id every node shares: "
                "set topology.pipeline_id on every host"
            )
    visible = list(vis.indices) if (gpus or listed is not None) else None
    topologies: list[Topology] = []
    for d in range(replicas):
        try:
            topo = map_gpus(config, visible, gpus, dp_rank=d, source=_source(method, pid))
        except GpuMapError as e:
            if d == 0 or observed:
                warnings.append(f"{who}: {e}")
            break
        if observed and not (set(topo.gpus) & observed):
            continue
        topologies.append(topo)
    if titles:
        topologies = _cross_check(
            topologies, titles, config, who=who, warnings=warnings, method=method, pid=pid
        )
    if observed:
        placed = {g for t in topologies for g in t.gpus}
        stray = sorted(observed - placed)
        if stray:
            warnings.append(f"{who}: NVML shows it on GPU(s) {stray} where its flags place no rank")
        idle = sorted(placed - observed)
        if idle:
            warnings.append(
                f"{who}: its flags place ranks on GPU(s) {idle} "
                "where NVML sees none of its processes"
            )
    return topologies


def _cross_check(
    topologies: list[Topology],
    titles: Mapping[int, TitleRanks],
    config: EngineConfig,
    *,
    who: str,
    warnings: list[str],
    method: str,
    pid: int | None,
) -> list[Topology]:
    """Compare computed stages with the ranks process titles report; titles win."""
    with_pp = {g: r for g, r in titles.items() if r.pp is not None or config.pp_size == 1}
    if not with_pp:
        return topologies
    stage_of = {g: s for t in topologies for s, st in enumerate(t.stages) for g in st}
    wrong = sorted(g for g, r in with_pp.items() if stage_of.get(g) != (r.pp or 0))
    if not wrong:
        return topologies
    warnings.append(
        f"{who}: process titles put GPU(s) {wrong} in other stages than its flags imply; "
        "using the titles"
    )
    by_stage: dict[int, list[tuple[int, int]]] = {}
    for g, r in with_pp.items():
        by_stage.setdefault(r.pp or 0, []).append((r.tp or 0, g))
    if sorted(by_stage) != list(range(len(by_stage))):
        warnings.append(f"{who}: process titles do not cover every stage; keeping its flags")
        return topologies
    stages = tuple(tuple(g for _, g in sorted(by_stage[s])) for s in sorted(by_stage))
    try:
        topo = Topology(
            stages=stages,
            engine=config.name,
            source=_source(method, pid) + "+titles",
            argv=config.argv,
            env=dict(config.env),
        )
    except TopologyError as e:
        warnings.append(f"{who}: process titles are inconsistent ({e}); keeping its flags")
        return topologies
    return [topo]


def _source(method: str, pid: int | None) -> str:
    return f"{method}:{pid}" if pid is not None else method
