"""Discover which serving engine runs on which GPUs, in which pipeline stage.

From NVML's compute processes (GPU -> PIDs) to `/proc/PID/cmdline`, up the
parent chain to the engine's launcher (SGLang and vLLM run their GPU work in
spawned scheduler/worker processes), then the launcher's flags and environment
decide the stage of each GPU. Process titles such as `sglang::scheduler_PP1_TP0`
or `VLLM::Worker_PP1_TP0`, when present, cross-check the computed placement.

When no engine process can be seen (a container, another PID namespace), a
static topology file is used if given, else `/proc` is scanned for launchers;
`DiscoveryResult.method` and `warnings` say what happened. Everything stored
or logged here is redacted (bubblewatch.topology.redact).

This module drives discovery and names the pipelines; the process-tree walk
is in `_proctree`, the placement of ranks on GPUs in `_placement`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bubblewatch import engines
from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.topology._launchers import detect_engine
from bubblewatch.topology._placement import place
from bubblewatch.topology._proctree import (
    Launcher,
    Walker,
)
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.endpoint import metrics_url
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.identity import node_identity
from bubblewatch.topology.procfs import PackageVersions, ProcFS, ProcReader, ProcUnavailable
from bubblewatch.topology.static import StaticPipeline, load_static_pipelines
from bubblewatch.topology.training import (
    LocalFiles,
    TrainingJob,
    discover_training,
    scan_training,
    training_from_cmdline,
)

__all__ = ["DiscoveredPipeline", "DiscoveryResult", "discover_from_cmdline", "discover_topology"]

log = logging.getLogger(__name__)

# The Python distribution each engine is installed as (its *.dist-info directory).
# Asks a running engine its version (its HTTP endpoint); None when it does not answer.
VersionProbe = Callable[[EngineConfig], "str | None"]


@dataclass(frozen=True)
class DiscoveredPipeline:
    """One engine's pipeline on this host and how it was found."""

    topology: Topology
    engine: EngineConfig | None
    method: str  # "proc", "proc-scan", "static-file", "cmdline"
    launcher_pid: int | None = None
    metrics_url: str | None = None
    # Global stage index of the topology's first stage (a multi-node engine, see identity).
    first_stage: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline_id": self.topology.pipeline_id,
            "first_stage": self.first_stage,
            "method": self.method,
            "launcher_pid": self.launcher_pid,
            "metrics_url": self.metrics_url,
            "topology": self.topology.to_dict(),
            "engine": None if self.engine is None else self.engine.to_dict(),
        }


@dataclass(frozen=True)
class DiscoveryResult:
    """All pipelines found, the overall method, and what could not be done."""

    pipelines: tuple[DiscoveredPipeline, ...]
    method: str  # "proc", "proc-scan", "static-file", "cmdline", "none"
    warnings: tuple[str, ...] = ()
    unassigned_gpus: tuple[int, ...] = ()  # GPUs in use by something that is not an engine

    @property
    def topology(self) -> Topology | None:
        """The first pipeline's topology (most hosts run one engine)."""
        return self.pipelines[0].topology if self.pipelines else None

    @property
    def engine(self) -> EngineConfig | None:
        return self.pipelines[0].engine if self.pipelines else None

    @property
    def topologies(self) -> tuple[Topology, ...]:
        return tuple(p.topology for p in self.pipelines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "pipelines": [p.to_dict() for p in self.pipelines],
            "warnings": list(self.warnings),
            "unassigned_gpus": list(self.unassigned_gpus),
        }


def discover_topology(
    processes: Mapping[int, Sequence[int]],
    gpus: Sequence[GpuInfo],
    proc_root: str = "/proc",
    static_file: str | None = None,
    *,
    proc: ProcReader | None = None,
    nvml_available: bool = True,
    version_probe: VersionProbe | None = None,
) -> DiscoveryResult:
    """Find the pipelines on this host from NVML's GPU -> PIDs map and a /proc tree.

    `gpus` is the host inventory (NVML index and UUID), used to resolve
    CUDA_VISIBLE_DEVICES. `proc` replaces the /proc reader (tests);
    `nvml_available=False` says the empty `processes` is for want of NVML.
    Each engine's version comes from its interpreter's site-packages, else from
    `version_probe` (the engine's HTTP endpoint), else it stays unknown.
    Errors in one engine's flags become warnings; discovery goes on.
    """
    reader = proc if proc is not None else ProcFS(proc_root)
    warnings: list[str] = []
    walker = Walker(reader, warnings)
    launchers: dict[int, Launcher] = {}
    unassigned: set[int] = set()
    any_pid = False
    for gpu in sorted(processes):
        for pid in processes[gpu]:
            any_pid = True
            hit = walker.launcher(pid)
            if hit is None:
                if walker.argv(pid) is not None:
                    unassigned.add(gpu)
                continue
            lpid, argv, ranks = hit
            entry = launchers.setdefault(lpid, Launcher(lpid, argv))
            entry.gpus.add(gpu)
            if ranks is not None:
                entry.titles[gpu] = ranks
    pipelines: list[DiscoveredPipeline] = []
    for entry in sorted(launchers.values(), key=lambda e: e.pid):
        pipelines.extend(
            _pipelines_for(
                entry, reader, gpus, warnings, method="proc", live=True, probe=version_probe
            )
        )
    # Training jobs on the GPUs no serving engine holds (bubblewatch.topology.training).
    served = {g for p in pipelines for g in p.topology.gpus}
    root = getattr(reader, "root", None)
    jobs = discover_training(processes, gpus, reader, warnings, proc_root=root, skip_gpus=served)
    pipelines.extend(_training_pipelines(jobs, warnings))
    method = "proc" if pipelines else "none"
    unassigned -= {g for p in pipelines for g in p.topology.gpus}
    if not pipelines:
        if any_pid:
            warnings.append(
                "no engine process found for the GPU processes NVML reports "
                "(hidden by a container or another PID namespace, or not an engine)"
            )
        elif nvml_available:
            warnings.append("NVML reports no compute processes (or none is visible from here)")
        if static_file is not None:
            pipelines = [
                _from_static(sp, static_file) for sp in load_static_pipelines(static_file, gpus)
            ]
            method = "static-file"
            warnings.append(f"using the static topology file {static_file}")
        else:
            pipelines = _scan(reader, walker, gpus, warnings, version_probe)
            method = "proc-scan" if pipelines else "none"
            if pipelines:
                warnings.append(
                    "topology taken from engine command lines found in the process table, "
                    "not confirmed by NVML's process list"
                )
    pipelines = _unique_ids(pipelines)
    for w in warnings:
        log.debug("discovery: %s", w)
    return DiscoveryResult(
        pipelines=tuple(pipelines),
        method=method,
        warnings=tuple(dict.fromkeys(warnings)),
        unassigned_gpus=tuple(sorted(unassigned)),
    )


def discover_from_cmdline(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    gpus: Sequence[GpuInfo] = (),
    *,
    version: str | None = None,
) -> DiscoveryResult:
    """Topology from a command line the user gives (`topology --engine-cmdline`).

    `version` (`--engine-version`) has the engine's flags read by that version's table.
    """
    config = parse_engine_cmdline(argv, env, where="--engine-cmdline", version=version)
    warnings: list[str] = []
    if config is None:
        job = training_from_cmdline(argv, env or {}, gpus, files=LocalFiles())
        if job is None:
            raise InputError(
                "not an SGLang, vLLM or TensorRT-LLM launch command, nor a training launch "
                "(torchrun, deepspeed, accelerate launch, srun, python with RANK/WORLD_SIZE)",
                path="--engine-cmdline",
            )
        pipelines = _training_pipelines([job], warnings)
        if version is not None:
            warnings.append(f"engine version {version} ignored: this is a training launch")
        return DiscoveryResult(
            tuple(_unique_ids(pipelines)), "cmdline", (*job.layout.notes, *warnings)
        )
    topologies = place(config, None, gpus, warnings, observed=set(), titles={}, method="cmdline")
    pipelines = _named(config, None, topologies, "cmdline")
    if not gpus:
        warnings.append(
            "no GPU inventory (NVML unavailable): GPU numbers are CUDA_VISIBLE_DEVICES entries "
            "or CUDA device ordinals, taken to be host GPU indices"
        )
    return DiscoveryResult(tuple(_unique_ids(pipelines)), "cmdline", tuple(warnings))


def _pipelines_for(
    entry: Launcher,
    reader: ProcReader,
    gpus: Sequence[GpuInfo],
    warnings: list[str],
    *,
    method: str,
    live: bool,
    probe: VersionProbe | None = None,
) -> list[DiscoveredPipeline]:
    try:
        env = reader.environ(entry.pid)
    except ProcUnavailable as e:
        warnings.append(
            f"{e}; CUDA_VISIBLE_DEVICES and the layer partition of this engine are unknown "
            "and taken as unset"
        )
        env = {}
    engine = engines.get(detect_engine(entry.argv))
    version = None
    if engine is not None and isinstance(reader, PackageVersions):
        package = engine.command.package
        version = reader.installed_version(entry.pid, package, entry.argv, env)
    where = f"/proc/{entry.pid}/cmdline"
    try:
        config = parse_engine_cmdline(entry.argv, env, where=where, version=version)
        if config is not None and config.version is None and probe is not None:
            probed = probe(config)
            if probed is not None:
                config = parse_engine_cmdline(entry.argv, env, where=where, version=probed)
    except InputError as e:
        warnings.append(str(e))
        return []
    if config is None:  # pragma: no cover - the walker only returns engine command lines
        return []
    topologies = place(
        config,
        entry.pid,
        gpus,
        warnings,
        observed=entry.gpus if live else set(),
        titles=entry.titles,
        method=method,
    )
    return _named(config, entry.pid, topologies, method)


def _named(
    config: EngineConfig, pid: int | None, topologies: Sequence[Topology], method: str
) -> list[DiscoveredPipeline]:
    """An engine's placed topologies as pipelines with an id and its metrics endpoint.

    A multi-node engine's id and first stage come from its flags (identity), so
    every node names the pipeline alike; otherwise the id is the engine's port.
    """
    url = metrics_url(config)
    node = node_identity(config)
    if node is not None and node.pipeline_id:
        base_id = node.pipeline_id
    elif config.port:
        base_id = f"{config.name}:{config.port}"
    else:
        base_id = f"{config.name}:pid{pid}"
    out = []
    for i, topo in enumerate(topologies):
        pid_suffix = f"/dp{i}" if len(topologies) > 1 else ""
        out.append(
            DiscoveredPipeline(
                topology=_with_id(topo, base_id + pid_suffix),
                engine=config,
                method=method,
                launcher_pid=pid,
                metrics_url=url,
                first_stage=0 if node is None else node.first_stage,
            )
        )
    return out


def _scan(
    reader: ProcReader,
    walker: Walker,
    gpus: Sequence[GpuInfo],
    warnings: list[str],
    probe: VersionProbe | None,
) -> list[DiscoveredPipeline]:
    """Find engine launchers in the whole process table (no NVML process list)."""
    out: list[DiscoveredPipeline] = []
    for entry in walker.scan():
        out.extend(
            _pipelines_for(
                entry, reader, gpus, warnings, method="proc-scan", live=False, probe=probe
            )
        )
    if not out:
        root = getattr(reader, "root", None)
        out.extend(
            _training_pipelines(scan_training(reader, gpus, warnings, proc_root=root), warnings)
        )
    return out


def _training_pipelines(
    jobs: Iterable[TrainingJob], warnings: list[str]
) -> list[DiscoveredPipeline]:
    """Each training job's pipelines (one per data-parallel replica with a pipeline)."""
    out: list[DiscoveredPipeline] = []
    for job in jobs:
        engine = job.engine_config()
        for topo, first in job.topologies(warnings):
            out.append(
                DiscoveredPipeline(
                    topology=topo,
                    engine=engine,
                    method=job.method,
                    launcher_pid=job.launcher_pid,
                    first_stage=first,
                )
            )
    return out


def _from_static(sp: StaticPipeline, path: str) -> DiscoveredPipeline:
    url = sp.metrics_url or (metrics_url(sp.engine) if sp.engine is not None else None)
    return DiscoveredPipeline(
        topology=sp.topology, engine=sp.engine, method="static-file", metrics_url=url
    )


def _with_id(topo: Topology, pipeline_id: str) -> Topology:
    return topo if topo.pipeline_id else replace(topo, pipeline_id=pipeline_id)


def _unique_ids(pipelines: Iterable[DiscoveredPipeline]) -> list[DiscoveredPipeline]:
    """Give every pipeline a distinct id (two engines on one port in different namespaces)."""
    out: list[DiscoveredPipeline] = []
    seen: set[str] = set()
    for i, p in enumerate(pipelines):
        pipeline_id = p.topology.pipeline_id or f"pipeline{i}"
        if pipeline_id in seen:
            pipeline_id += f"#{p.launcher_pid if p.launcher_pid is not None else i}"
        seen.add(pipeline_id)
        if pipeline_id != p.topology.pipeline_id:
            p = replace(p, topology=replace(p.topology, pipeline_id=pipeline_id))  # noqa: PLW2901
        out.append(p)
    return out
