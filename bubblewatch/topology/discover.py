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
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.errors import InputError
from bubblewatch.topology.cmdline import detect_engine, parse_engine_cmdline
from bubblewatch.topology.endpoint import metrics_url
from bubblewatch.topology.engine import EngineConfig
from bubblewatch.topology.gpumap import GpuMapError, map_gpus, visible_devices
from bubblewatch.topology.procfs import ProcFS, ProcReader, ProcUnavailable
from bubblewatch.topology.static import StaticPipeline, load_static_pipelines

log = logging.getLogger(__name__)

MAX_PARENT_DEPTH = 16
_TITLE = re.compile(r"^(?:sglang|vllm)::", re.IGNORECASE)
_TITLE_RANK = re.compile(r"(?:^|[_\s:])(PP|TP|DP)(\d+)(?=$|[_\s])", re.IGNORECASE)


@dataclass(frozen=True)
class DiscoveredPipeline:
    """One engine's pipeline on this host and how it was found."""

    topology: Topology
    engine: EngineConfig | None
    method: str  # "proc", "proc-scan", "static-file", "cmdline"
    launcher_pid: int | None = None
    metrics_url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline_id": self.topology.pipeline_id,
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


@dataclass(frozen=True)
class _TitleRanks:
    pp: int | None
    tp: int | None
    dp: int | None


def title_ranks(argv: Sequence[str]) -> _TitleRanks | None:
    """Ranks from an engine process title (`sglang::scheduler_PP1_TP0`), if it is one."""
    if not argv or not _TITLE.match(argv[0]):
        return None
    found = {k.upper(): int(v) for k, v in _TITLE_RANK.findall(argv[0])}
    return _TitleRanks(found.get("PP"), found.get("TP"), found.get("DP"))


@dataclass
class _Launcher:
    pid: int
    argv: list[str]
    gpus: set[int] = field(default_factory=set)
    titles: dict[int, _TitleRanks] = field(default_factory=dict)  # gpu -> ranks


class _Walker:
    """Follows PIDs up to their engine launcher, remembering what went wrong."""

    def __init__(self, reader: ProcReader, warnings: list[str]) -> None:
        self.reader = reader
        self.warnings = warnings
        self._cache: dict[int, list[str] | None] = {}

    def argv(self, pid: int, *, quiet: bool = False) -> list[str] | None:
        if pid not in self._cache:
            try:
                self._cache[pid] = self.reader.cmdline(pid)
            except ProcUnavailable as e:
                if not quiet:
                    self.warnings.append(str(e))
                self._cache[pid] = None
        return self._cache[pid]

    def parent(self, pid: int, *, quiet: bool = False) -> int | None:
        try:
            return self.reader.ppid(pid)
        except ProcUnavailable as e:
            if not quiet:
                self.warnings.append(str(e))
            return None

    def launcher(self, pid: int) -> tuple[int, list[str], _TitleRanks | None] | None:
        """The topmost ancestor (or pid itself) whose command line launches an engine."""
        seen: set[int] = set()
        cur: int | None = pid
        ranks: _TitleRanks | None = None
        found: tuple[int, list[str]] | None = None
        depth = 0
        while cur is not None and cur not in seen and depth < MAX_PARENT_DEPTH:
            seen.add(cur)
            depth += 1
            # Above a launcher we only look for a forked copy: failures there are no news.
            argv = self.argv(cur, quiet=found is not None)
            if argv is None:
                break
            if ranks is None:
                ranks = title_ranks(argv)
            if detect_engine(argv) is not None:
                # Forked workers keep the launcher's argv: keep climbing while it repeats.
                if found is not None and argv != found[1]:
                    break
                found = (cur, argv)
            elif found is not None:
                break
            cur = self.parent(cur, quiet=found is not None)
        return None if found is None else (found[0], found[1], ranks)


def discover_topology(
    processes: Mapping[int, Sequence[int]],
    gpus: Sequence[GpuInfo],
    proc_root: str = "/proc",
    static_file: str | None = None,
    *,
    proc: ProcReader | None = None,
    nvml_available: bool = True,
) -> DiscoveryResult:
    """Find the pipelines on this host from NVML's GPU -> PIDs map and a /proc tree.

    `gpus` is the host inventory (NVML index and UUID), used to resolve
    CUDA_VISIBLE_DEVICES. `proc` replaces the /proc reader (tests);
    `nvml_available=False` says the empty `processes` is for want of NVML.
    Errors in one engine's flags become warnings; discovery goes on.
    """
    reader = proc if proc is not None else ProcFS(proc_root)
    warnings: list[str] = []
    walker = _Walker(reader, warnings)
    launchers: dict[int, _Launcher] = {}
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
            entry = launchers.setdefault(lpid, _Launcher(lpid, argv))
            entry.gpus.add(gpu)
            if ranks is not None:
                entry.titles[gpu] = ranks
    pipelines: list[DiscoveredPipeline] = []
    for entry in sorted(launchers.values(), key=lambda e: e.pid):
        pipelines.extend(_pipelines_for(entry, reader, gpus, warnings, method="proc", live=True))
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
            pipelines = _scan(reader, walker, gpus, warnings)
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
    argv: Sequence[str], env: Mapping[str, str] | None = None, gpus: Sequence[GpuInfo] = ()
) -> DiscoveryResult:
    """Topology from a command line the user gives (`topology --engine-cmdline`)."""
    config = parse_engine_cmdline(argv, env, where="--engine-cmdline")
    if config is None:
        raise InputError(
            "not an SGLang, vLLM or TensorRT-LLM launch command", path="--engine-cmdline"
        )
    warnings: list[str] = []
    pipelines = _place(config, None, gpus, warnings, observed=set(), titles={}, method="cmdline")
    if not gpus:
        warnings.append(
            "no GPU inventory (NVML unavailable): GPU numbers are CUDA_VISIBLE_DEVICES entries "
            "or CUDA device ordinals, taken to be host GPU indices"
        )
    return DiscoveryResult(tuple(_unique_ids(pipelines)), "cmdline", tuple(warnings))


def _pipelines_for(
    entry: _Launcher,
    reader: ProcReader,
    gpus: Sequence[GpuInfo],
    warnings: list[str],
    *,
    method: str,
    live: bool,
) -> list[DiscoveredPipeline]:
    try:
        env = reader.environ(entry.pid)
    except ProcUnavailable as e:
        warnings.append(
            f"{e}; CUDA_VISIBLE_DEVICES and the layer partition of this engine are unknown "
            "and taken as unset"
        )
        env = {}
    try:
        config = parse_engine_cmdline(entry.argv, env, where=f"/proc/{entry.pid}/cmdline")
    except InputError as e:
        warnings.append(str(e))
        return []
    if config is None:  # pragma: no cover - the walker only returns engine command lines
        return []
    return _place(
        config,
        entry.pid,
        gpus,
        warnings,
        observed=entry.gpus if live else set(),
        titles=entry.titles,
        method=method,
    )


def _place(
    config: EngineConfig,
    pid: int | None,
    gpus: Sequence[GpuInfo],
    warnings: list[str],
    *,
    observed: set[int],
    titles: Mapping[int, _TitleRanks],
    method: str,
) -> list[DiscoveredPipeline]:
    """Map an engine's ranks to GPUs, one Topology per data-parallel replica it runs here."""
    who = f"{config.name}" + (f" (pid {pid})" if pid is not None else "")
    vis = visible_devices(
        config.cuda_visible_devices, gpus, device_order=config.env.get("CUDA_DEVICE_ORDER")
    )
    warnings.extend(f"{who}: {w}" for w in vis.warnings)
    replicas = config.dp_size
    if config.name == "sglang" and config.flags.get("--enable-dp-attention") is True:
        replicas = 1  # DP attention runs inside the one TP group
    if config.nnodes > 1:
        warnings.append(
            f"{who}: multi-node engine (node {config.node_rank} of {config.nnodes}): "
            "only this node's stages are shown"
        )
    visible = list(vis.indices) if (gpus or config.cuda_visible_devices is not None) else None
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
    url = metrics_url(config)
    base_id = f"{config.name}:{config.port}" if config.port else f"{config.name}:pid{pid}"
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
            )
        )
    return out


def _cross_check(
    topologies: list[Topology],
    titles: Mapping[int, _TitleRanks],
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


def _scan(
    reader: ProcReader, walker: _Walker, gpus: Sequence[GpuInfo], warnings: list[str]
) -> list[DiscoveredPipeline]:
    """Find engine launchers in the whole process table (no NVML process list)."""
    tops: dict[int, _Launcher] = {}
    for pid in reader.pids():
        argv = walker.argv(pid)
        if argv is None or detect_engine(argv) is None:
            continue
        hit = walker.launcher(pid)
        if hit is not None:
            tops.setdefault(hit[0], _Launcher(hit[0], hit[1]))
    out: list[DiscoveredPipeline] = []
    for entry in sorted(tops.values(), key=lambda e: e.pid):
        out.extend(_pipelines_for(entry, reader, gpus, warnings, method="proc-scan", live=False))
    return out


def _from_static(sp: StaticPipeline, path: str) -> DiscoveredPipeline:
    url = sp.metrics_url or (metrics_url(sp.engine) if sp.engine is not None else None)
    return DiscoveredPipeline(
        topology=sp.topology, engine=sp.engine, method="static-file", metrics_url=url
    )


def _source(method: str, pid: int | None) -> str:
    return f"{method}:{pid}" if pid is not None else method


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
