"""NeMo: Megatron-Core parallelism configured through Hydra (1.x) or the NeMo 2 recipes.

NeMo 1.x scripts (`examples/nlp/language_modeling/megatron_gpt_pretraining.py`,
`@hydra_runner(config_path="conf", config_name="megatron_gpt_config")`) read
a YAML config, changed by `key=value` overrides (`+key=`/`++key=` add). The
keys: `model.tensor_model_parallel_size`, `model.pipeline_model_parallel_size`,
`model.virtual_pipeline_model_parallel_size`, `model.context_parallel_size`,
`model.expert_model_parallel_size`, `model.micro_batch_size`,
`model.global_batch_size`, `model.num_layers`, `trainer.devices`,
`trainer.num_nodes`. NeMo 2 overrides put the sizes under `trainer.strategy.`
and the batch under `data.`. `--config-path`/`-cp` is relative to the script
(Hydra), `--config-name`/`-cn` names the file without `.yaml`. NeMo builds
its process groups with Megatron-Core's `initialize_model_parallel` (default
order tp-cp-ep-dp-pp; `nemo/collections/nlp/parts/nlp_overrides.py`, 1.23),
and runs Megatron's schedules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from bubblewatch.model.schedule import resolve_schedule
from bubblewatch.safeyaml import YamlError, parse_yaml, yaml_value
from bubblewatch.topology.training._args import TrainingArgsError
from bubblewatch.topology.training.context import JobContext, script_dir
from bubblewatch.topology.training.files import ConfigUnavailable
from bubblewatch.topology.training.layout import ParallelLayout

VERSIONS = "NeMo 1.23 Hydra configs / NeMo 2 strategy overrides"
# Scripts whose @hydra_runner default config is known (NeMo examples).
_DEFAULT_CONFIGS = {
    "megatron_gpt_pretraining.py": "megatron_gpt_config",
    "megatron_bert_pretraining.py": "megatron_bert_config",
    "megatron_t5_pretraining.py": "megatron_t5_config",
}
_KEYS = {
    "tp": ("model.tensor_model_parallel_size", "trainer.strategy.tensor_model_parallel_size"),
    "pp": ("model.pipeline_model_parallel_size", "trainer.strategy.pipeline_model_parallel_size"),
    "vp": (
        "model.virtual_pipeline_model_parallel_size",
        "trainer.strategy.virtual_pipeline_model_parallel_size",
    ),
    "cp": ("model.context_parallel_size", "trainer.strategy.context_parallel_size"),
    "ep": ("model.expert_model_parallel_size", "trainer.strategy.expert_model_parallel_size"),
    "mbs": ("model.micro_batch_size", "data.micro_batch_size"),
    "gbs": ("model.global_batch_size", "data.global_batch_size"),
    "layers": ("model.num_layers",),
    "devices": ("trainer.devices",),
    "nodes": ("trainer.num_nodes",),
}


def overrides(args: tuple[str, ...]) -> dict[str, str]:
    """Hydra `key=value` words (with `+`/`++` prefixes); flags are skipped."""
    out: dict[str, str] = {}
    for a in args:
        if a.startswith("-") or "=" not in a:
            continue
        key, _, value = a.lstrip("+").partition("=")
        if key and all(part.isidentifier() for part in key.split(".")):
            out[key] = value
    return out


def looks_like_nemo(module: str | None, script: str | None, args: tuple[str, ...]) -> bool:
    if module is not None and module.startswith("nemo"):
        return True
    name = os.path.basename(script or "")
    if name in _DEFAULT_CONFIGS:
        return True
    keys = overrides(args)
    return any(k.startswith(("model.", "trainer.strategy.")) and "parallel" in k for k in keys)


def parse_nemo(ctx: JobContext, warnings: list[str]) -> ParallelLayout:
    where = ctx.where
    ov = overrides(ctx.program.args)
    cfg, cfg_path = _config(ctx, warnings)
    sources: dict[str, str] = {}

    def value(field: str, default: int | None) -> int | None:
        for key in _KEYS[field]:
            if key in ov:
                sources[field] = key + "="
                return _int(yaml_value(ov[key], TrainingArgsError, where=where), key, where)
        for key in _KEYS[field]:
            v = _lookup(cfg, key)
            if v is not None:
                sources[field] = f"{cfg_path}: {key}"
                return _int(v, key, where)
        return default

    tp, pp, cp, ep = (value(f, 1) or 1 for f in ("tp", "pp", "cp", "ep"))
    vp = value("vp", None)
    mbs, gbs, layers = value("mbs", None), value("gbs", None), value("layers", None)
    model = tp * pp * cp
    if ctx.world_size % model:
        raise TrainingArgsError(
            f"world size {ctx.world_size} is not divisible by tp x pp x cp = {model}",
            path=where,
            field="model.pipeline_model_parallel_size",
        )
    dp = ctx.world_size // model
    m = None if mbs is None or gbs is None else max(gbs // (mbs * dp), 1)
    v = vp if vp is not None and vp > 1 and pp > 1 else 1
    schedule = resolve_schedule("nemo", None, pp, v)
    return ParallelLayout(
        framework="nemo",
        launcher=ctx.launcher,
        world_size=ctx.world_size,
        pp=pp,
        tp=tp,
        dp=dp,
        cp=cp,
        ep=ep,
        virtual_stages=v,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        micro_batches=m,
        schedule=None if schedule is None else schedule.name,
        order=("tp", "cp", "dp", "pp"),
        num_layers=layers,
        config_file=cfg_path,
        version_note=VERSIONS,
        sources=sources,
    )


def world_from_overrides(args: tuple[str, ...]) -> int | None:
    """trainer.devices x trainer.num_nodes, when a command line gives them."""
    ov = overrides(args)
    try:
        devices = int(ov["trainer.devices"]) if "trainer.devices" in ov else None
        nodes = int(ov.get("trainer.num_nodes", "1"))
    except ValueError:
        return None
    return None if devices is None else devices * nodes


def _config(ctx: JobContext, warnings: list[str]) -> tuple[Mapping[str, Any], str | None]:
    args = ctx.program.args
    path = _flag(args, ("--config-path", "-cp"))
    name = _flag(args, ("--config-name", "-cn"))
    script = os.path.basename(ctx.program.script or "")
    if name is None:
        name = _DEFAULT_CONFIGS.get(script)
        if name is not None and path is None:
            path = "conf"
    if name is None:
        return {}, None
    base = script_dir(ctx)
    full = ctx.files.resolve(
        os.path.join(path or ".", name if name.endswith(".yaml") else name + ".yaml"), base
    )
    try:
        root = parse_yaml(ctx.files.read_text(full), full)
    except ConfigUnavailable as e:
        warnings.append(f"{where_of(ctx)}: Hydra config {e}; overrides only")
        return {}, None
    except YamlError as e:
        warnings.append(f"{e}; overrides only")
        return {}, None
    doc = None if root is None else root.plain()
    return (doc if isinstance(doc, dict) else {}), full


def where_of(ctx: JobContext) -> str:
    return ctx.where


def _flag(args: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    found = None
    for i, a in enumerate(args):
        key, eq, value = a.partition("=")
        if key in names:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def _lookup(cfg: Mapping[str, Any], dotted: str) -> Any:
    v: Any = cfg
    for part in dotted.split("."):
        if not isinstance(v, Mapping) or part not in v:
            return None
        v = v[part]
    if isinstance(v, str) and "${" in v:
        return None  # an interpolation: not resolved here
    return v


def _int(v: Any, key: str, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise TrainingArgsError(
            f"{key} expects a positive integer, got {v!r}", path=where, field=key
        )
    return v
