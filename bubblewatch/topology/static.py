"""The static topology file: pipelines written down by the operator (docs/topology.md).

Used where engine processes cannot be seen (containers, another PID
namespace). YAML, versioned:

    version: 1
    pipelines:
      - id: kimi-pp8
        engine: sglang
        stages: [[0], [1], [2], [3], [4], [5], [6], [7]]   # or pp_size/tp_size/...
        interconnect: pcie
        cmdline: "python -m sglang.launch_server --pp-size 8 ..."   # optional
        env: {SGLANG_PP_LAYER_PARTITION: "8,8,8,8,8,8,8,5"}         # optional
        metrics_url: http://127.0.0.1:30000/metrics                  # optional

Errors name the file, the line and the field (`InputError`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bubblewatch import engines
from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.safeyaml import YamlNode, load_yaml_file
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.gpumap import GpuMapError, map_gpus
from bubblewatch.topology.redact import redact_env

FILE_VERSION = 1
_PIPELINE_KEYS = frozenset(
    {
        "id",
        "engine",
        "stages",
        "pp_size",
        "tp_size",
        "base_gpu_id",
        "gpu_id_step",
        "interconnect",
        "cmdline",
        "env",
        "metrics_url",
    }
)
_INTERCONNECTS = frozenset({"nvlink", "pcie", "mixed", "unknown"})


@dataclass(frozen=True)
class StaticPipeline:
    """One pipeline from the file: its topology, and the engine if a command line was given."""

    topology: Topology
    engine: EngineConfig | None = None
    metrics_url: str | None = None


def load_static_pipelines(path: str, gpus: Sequence[GpuInfo] = ()) -> list[StaticPipeline]:
    """Read and validate a static topology file; every pipeline in it."""
    root = load_yaml_file(path, InputError, what="topology file")
    if root is None or not isinstance(root.value, dict):
        raise InputError("expected a mapping with 'version' and 'pipelines'", path=path, line=1)
    data = root.plain()
    version = data.get("version")
    if version != FILE_VERSION:
        raise InputError(
            f"unsupported version {version!r}; this bubblewatch reads version {FILE_VERSION}",
            path=path,
            line=root.line_at("version"),
            field="version",
        )
    if "pipelines" in data:
        raw = data["pipelines"]
        if not isinstance(raw, list) or not raw:
            raise InputError(
                "'pipelines' must be a non-empty list",
                path=path,
                line=root.line_at("pipelines"),
                field="pipelines",
            )
        items: list[tuple[Any, tuple[str | int, ...]]] = [
            (item, ("pipelines", i)) for i, item in enumerate(raw)
        ]
    else:
        # One pipeline written at the top level.
        items = [({k: v for k, v in data.items() if k != "version"}, ())]
    out: list[StaticPipeline] = []
    ids: set[str] = set()
    for i, (item, where) in enumerate(items):
        sp = _pipeline(item, where, index=i, path=path, root=root, gpus=gpus)
        if sp.topology.pipeline_id in ids:
            raise InputError(
                f"duplicate pipeline id {sp.topology.pipeline_id!r}",
                path=path,
                line=root.line_at(*where, "id"),
                field=_field(where, "id"),
            )
        ids.add(sp.topology.pipeline_id)
        out.append(sp)
    return out


def load_topology_file(path: str, gpus: Sequence[GpuInfo] = ()) -> Topology:
    """The topology of a static file that describes one pipeline."""
    pipelines = load_static_pipelines(path, gpus)
    if len(pipelines) != 1:
        raise InputError(
            f"the file describes {len(pipelines)} pipelines; use load_static_pipelines",
            path=path,
            field="pipelines",
        )
    return pipelines[0].topology


def _field(where: tuple[str | int, ...], key: str) -> str:
    prefix = "".join(f"[{w}]" if isinstance(w, int) else str(w) for w in where)
    return f"{prefix}.{key}" if prefix else key


def _pipeline(
    item: Any,
    where: tuple[str | int, ...],
    *,
    index: int,
    path: str,
    root: YamlNode,
    gpus: Sequence[GpuInfo],
) -> StaticPipeline:
    def err(msg: str, key: str | None = None) -> InputError:
        line = root.line_at(*where, key) if key else root.line_at(*where)
        return InputError(msg, path=path, line=line, field=_field(where, key) if key else None)

    if not isinstance(item, Mapping):
        raise err("each pipeline must be a mapping")
    unknown = sorted(set(map(str, item)) - _PIPELINE_KEYS)
    if unknown:
        raise err(
            f"unknown key {unknown[0]!r} (expected one of {', '.join(sorted(_PIPELINE_KEYS))})",
            unknown[0],
        )
    engine_name = item.get("engine")
    if engine_name is not None and (
        not isinstance(engine_name, str) or not engines.get(engine_name)
    ):
        raise err(
            f"engine must be one of {', '.join(sorted(engines.names()))}, got {engine_name!r}",
            "engine",
        )
    interconnect = item.get("interconnect")
    if interconnect is not None and interconnect not in _INTERCONNECTS:
        raise err(
            f"interconnect must be one of {', '.join(sorted(_INTERCONNECTS))}, "
            f"got {interconnect!r}",
            "interconnect",
        )
    env_raw = item.get("env", {})
    if not isinstance(env_raw, Mapping) or not all(
        isinstance(v, (str, int, float)) for v in env_raw.values()
    ):
        raise err("env must be a mapping of names to strings", "env")
    env = {str(k): str(v) for k, v in env_raw.items()}
    config: EngineConfig | None = None
    cmdline = item.get("cmdline")
    if cmdline is not None:
        if isinstance(cmdline, str):
            try:
                argv = shlex.split(cmdline)
            except ValueError as e:
                raise err(f"cmdline is not a valid shell command line: {e}", "cmdline") from e
        elif isinstance(cmdline, list) and all(isinstance(a, str) for a in cmdline):
            argv = list(cmdline)
        else:
            raise err("cmdline must be a string or a list of strings", "cmdline")
        try:
            config = parse_engine_cmdline(argv, env, where=f"{path}: {_field(where, 'cmdline')}")
        except InputError as e:
            raise err(e.reason, "cmdline") from e
        if config is None:
            raise err("cmdline is not an SGLang, vLLM or TensorRT-LLM launch command", "cmdline")
        if engine_name is not None and engine_name != config.name:
            raise err(f"engine is {engine_name!r} but cmdline launches {config.name!r}", "engine")
        engine_name = config.name
    pipeline_id = str(item.get("id", f"pipeline{index}"))
    metrics = item.get("metrics_url")
    if metrics is not None and not (
        isinstance(metrics, str) and metrics.startswith(("http://", "https://"))
    ):
        raise err("metrics_url must be an http:// or https:// URL", "metrics_url")
    extras = {
        "engine": engine_name,
        "source": f"static-file:{path}",
        "pipeline_id": pipeline_id,
        "interconnect": interconnect,
    }
    has_layout = "stages" in item or "pp_size" in item
    try:
        if has_layout:
            layout = {
                k: item[k]
                for k in ("stages", "pp_size", "tp_size", "base_gpu_id", "gpu_id_step")
                if k in item
            }
            topo = Topology.from_dict({**layout, **extras})
        elif config is not None:
            topo = replace(map_gpus(config, None, gpus, source=extras["source"]), **extras)  # type: ignore[arg-type]
        else:
            raise err("a pipeline needs 'stages', 'pp_size' or an engine 'cmdline'")
    except (TopologyError, GpuMapError) as e:
        key = next((k for k in ("stages", "pp_size") if k in item), "cmdline")
        raise err(str(e), key) from e
    if config is not None:
        if (
            has_layout
            and (topo.pp_size, topo.tp_size) != (config.pp_size, config.tp_size)
            and config.nnodes == 1
        ):
            raise err(
                f"stages give pp={topo.pp_size} tp={topo.tp_size} but cmdline says "
                f"pp={config.pp_size} tp={config.tp_size}",
                "stages" if "stages" in item else "pp_size",
            )
        topo = replace(topo, argv=config.argv, env=dict(config.env))
    elif env:
        topo = replace(topo, env=redact_env(env))
    return StaticPipeline(topology=topo, engine=config, metrics_url=metrics)
