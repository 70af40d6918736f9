"""`bubblewatch topology`: which GPU runs which pipeline stage, and how that was found."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bubblewatch.analysis.target import split_cmdline
from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.sources.nvml.interconnect import Interconnect
from bubblewatch.topology.discover import (
    DiscoveredPipeline,
    DiscoveryResult,
    discover_from_cmdline,
    discover_topology,
)
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.probe import probe_version

log = logging.getLogger(__name__)

_METHODS = {
    "proc": "NVML's GPU processes, traced in /proc to the engine's command line",
    "proc-scan": "engine command lines found in the process table (NVML process list unavailable)",
    "static-file": "the static topology file",
    "cmdline": "the command line given with --engine-cmdline",
    "none": "nothing: no engine found",
}


@dataclass
class NvmlInventory:
    """What NVML says about this host: GPUs and GPU -> PIDs, or why it could not say."""

    available: bool
    gpus: list[GpuInfo] = field(default_factory=list)
    processes: dict[int, list[int]] = field(default_factory=dict)
    reason: str | None = None


def nvml_inventory() -> NvmlInventory:
    """Query NVML once for GPUs and their compute processes; never raises."""
    try:
        import pynvml
    except ImportError as e:  # pragma: no cover - a dependency of the package
        return NvmlInventory(False, reason=f"nvidia-ml-py is not installed ({e})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return NvmlInventory(
            False, reason=f"NVML unavailable: {e} (no NVIDIA driver on this host?)"
        )
    inv = NvmlInventory(True)
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            inv.gpus.append(
                GpuInfo(
                    index=i,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                    name=_text(pynvml.nvmlDeviceGetName(h)),
                )
            )
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            except pynvml.NVMLError as e:
                log.info("GPU %d: cannot list compute processes: %s", i, e)
                continue
            inv.processes[i] = [int(p.pid) for p in procs]
    except pynvml.NVMLError as e:
        inv.reason = f"NVML query failed part-way: {e}"
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return inv


def probe_links(
    result: DiscoveryResult,
) -> tuple[DiscoveryResult, dict[str, Interconnect], str | None]:
    """Each pipeline's stage links through NVML (interconnect set), or why NVML could not say."""
    from bubblewatch.sources.nvml import Nvml, NvmlError
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

    nvml = Nvml()
    try:
        nvml.init()
    except NvmlError as e:
        return result, {}, f"stage links unknown: {e}"
    try:
        probe = InterconnectProbe(nvml)
        links: dict[str, Interconnect] = {}
        pipelines = []
        for p in result.pipelines:
            topo, found = probe.apply(p.topology)
            links[topo.pipeline_id] = found
            pipelines.append(replace(p, topology=topo))
    finally:
        with contextlib.suppress(NvmlError):
            nvml.shutdown()
    return replace(result, pipelines=tuple(pipelines)), links, None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Discover serving engines (SGLang, vLLM, TensorRT-LLM) and training jobs "
        "(Megatron-LM, NeMo, DeepSpeed, torchtitan, torchrun DDP/FSDP) and their pipeline "
        "stages from NVML's GPU processes and /proc, a static topology file, or a command line."
    )
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--proc-root", default="/proc", metavar="DIR", help="the /proc tree to read")
    p.add_argument(
        "--topology-file",
        metavar="FILE",
        help="static topology YAML (docs/topology.md), used when engine processes are not visible",
    )
    p.add_argument(
        "--engine-cmdline",
        metavar="CMD",
        help="an engine launch command to analyse instead, e.g. "
        '"CUDA_VISIBLE_DEVICES=0,1 vllm serve M -pp 2"',
    )
    p.add_argument(
        "--engine-version",
        metavar="V",
        help="the version of the engine --engine-cmdline launches (e.g. 0.5.11): its flags are "
        "read as that version's parser reads them, and flags it refuses are listed",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inv = nvml_inventory()
    notes: list[str] = []
    if not inv.available:
        notes.append(f"{inv.reason}: GPU list and GPU processes unknown")
    elif inv.reason:
        notes.append(inv.reason)
    if args.engine_version is not None and args.engine_cmdline is None:
        raise InputError(
            "--engine-version says which version --engine-cmdline launches; give both",
            path="--engine-version",
        )
    if args.engine_cmdline is not None:
        from bubblewatch.analysis.target import check_version

        check_version(args.engine_version)
        argv, env = split_cmdline(args.engine_cmdline)
        result = discover_from_cmdline(argv, env, inv.gpus, version=args.engine_version)
    else:
        result = discover_topology(
            inv.processes,
            inv.gpus,
            args.proc_root,
            static_file=args.topology_file,
            nvml_available=inv.available,
            version_probe=probe_version,
        )
        if args.topology_file and result.method != "static-file":
            notes.append(f"engine processes were found, so {args.topology_file} was not used")
    links: dict[str, Interconnect] = {}
    if inv.available and result.pipelines:
        result, links, why = probe_links(result)
        if why:
            notes.append(why)
    if args.json:
        doc = {
            "nvml": {
                "available": inv.available,
                "reason": inv.reason,
                "gpus": [g.to_dict() for g in inv.gpus],
            },
            "found_by": _METHODS.get(result.method, result.method),
            "notes": notes,
            **result.to_dict(),
        }
        for p in doc["pipelines"]:
            found = links.get(p["pipeline_id"])
            p["links"] = None if found is None else found.to_dicts()
        json.dump(doc, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(result, inv, notes, links))
    return 0 if result.pipelines else 1


def render(
    result: DiscoveryResult,
    inv: NvmlInventory,
    notes: Sequence[str],
    links: Mapping[str, Interconnect] | None = None,
) -> str:
    """The human report: how things were found, then one table per pipeline."""
    lines: list[str] = []
    if inv.available:
        names = sorted({g.name for g in inv.gpus if g.name})
        lines.append(f"GPUs:      {len(inv.gpus)} ({', '.join(names) or 'unnamed'})")
    else:
        lines.append("GPUs:      unknown (NVML not available)")
    lines.append(f"found by:  {_METHODS.get(result.method, result.method)}")
    for n in notes:
        lines.append(f"note:      {n}")
    for p in result.pipelines:
        lines.append("")
        lines.extend(_pipeline_lines(p, inv.gpus, (links or {}).get(p.topology.pipeline_id)))
    if result.unassigned_gpus:
        lines.append("")
        lines.append(
            "GPUs in use by something that is not an engine: "
            + ", ".join(str(g) for g in result.unassigned_gpus)
        )
    if result.warnings:
        lines.append("")
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in result.warnings)
    if not result.pipelines:
        lines.append("")
        lines.append(
            "No pipeline found. Give --topology-file FILE (docs/topology.md) or "
            '--engine-cmdline "..." to describe it.'
        )
    return "\n".join(lines) + "\n"


def _pipeline_lines(
    p: DiscoveredPipeline, gpus: Sequence[GpuInfo], links: Interconnect | None = None
) -> list[str]:
    t = p.topology
    names = {g.index: g.name for g in gpus}
    head = f"pipeline {t.pipeline_id}: {t.engine or 'unknown engine'}, PP{t.pp_size}"
    if t.tp_size > 1:
        head += f" x TP{t.tp_size}"
    if p.launcher_pid is not None:
        head += f" (pid {p.launcher_pid})"
    out = [head, "  stage  GPUs"]
    for s, stage in enumerate(t.stages):
        gpu_text = ", ".join(str(g) for g in stage)
        label = names.get(stage[0], "")
        out.append(f"  {s:>5}  {gpu_text}" + (f"   {label}" if label else ""))
    out.append("  flow:  " + " -> ".join("[" + ",".join(map(str, st)) + "]" for st in t.stages))
    if p.engine is not None and p.engine.training is not None:
        from bubblewatch.cli._training_view import training_lines

        out.extend(training_lines(p.engine.training, t, p.first_stage))
    elif p.engine is not None:
        out.append(f"  version: {p.engine.version or 'unknown'}")
        out.append("  flags: " + flags_that_matter(p.engine))
        out.extend(f"  refused by its parser: {problem}" for problem in p.engine.problems)
    if p.engine is not None and p.engine.nnodes > 1:
        last = p.first_stage + t.pp_size - 1
        out.append(
            f"  node:  {p.engine.node_rank} of {p.engine.nnodes}; these are stages "
            f"{p.first_stage}-{last} of the engine's {p.engine.pp_size}"
        )
    out.append(f"  interconnect: {t.interconnect or 'unknown'}")
    if links is not None:
        out.extend(f"    {link.describe()}" for link in links.links)
    out.append(f"  metrics: {p.metrics_url or 'none (no Prometheus endpoint known)'}")
    out.append(f"  source: {t.source}")
    return out


def flags_that_matter(e: EngineConfig) -> str:
    """The engine settings the rules care about, in one line."""
    parts = [f"pp={e.pp_size}", f"tp={e.tp_size}"]
    if e.ep_size > 1:
        parts.append(f"ep={e.ep_size}")
    if e.dp_size > 1:
        parts.append(f"dp={e.dp_size}")
    if e.pp_async_batch_depth is not None:
        parts.append(f"pp_async_batch_depth={e.pp_async_batch_depth}")
    if e.pp_max_micro_batch_size is not None:
        parts.append(f"pp_max_micro_batch_size={e.pp_max_micro_batch_size}")
    graphs = "on" if e.cuda_graph else "off"
    if e.cudagraph_mode:
        graphs += f" ({e.cudagraph_mode})"
    parts.append(f"cuda_graph={graphs}")
    if e.async_scheduling is not None:
        parts.append(f"async_scheduling={'on' if e.async_scheduling else 'off'}")
    if e.max_running_requests is not None:
        parts.append(f"max_running_requests={e.max_running_requests}")
    if e.layer_partition is not None:
        parts.append("layer_partition=" + ",".join(map(str, e.layer_partition)))
    if e.base_gpu_id:
        parts.append(f"base_gpu_id={e.base_gpu_id}")
    if e.gpu_id_step != 1:
        parts.append(f"gpu_id_step={e.gpu_id_step}")
    return " ".join(parts)
