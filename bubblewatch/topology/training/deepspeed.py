"""DeepSpeed: pipeline stages and micro-batches from the script's flags and ds_config JSON.

DeepSpeed's own flags (`deepspeed.add_config_arguments`, 0.16): `--deepspeed`,
`--deepspeed_config FILE` (old spelling `--deepscale_config`); accelerate
passes `--deepspeed_config_file`. The batch keys (`deepspeed/runtime/config.py`,
`_set_batch_related_parameters`): `train_batch_size` = micro x gas x dp, with
`train_micro_batch_size_per_gpu` and `gradient_accumulation_steps`, any two
giving the third ("auto" values are filled in by the Hugging Face trainer and
are unknown here). `PipelineEngine` runs m = gradient_accumulation_steps
micro-batches per step (`deepspeed/runtime/pipe/engine.py`).

The number of stages is set in code (`PipelineModule(num_stages=...)`), not in
the config (its `pipeline.stages` key defaults to "auto" and the engine does
not read it), so it comes from the script's flags: Megatron-DeepSpeed's
`--pipeline-model-parallel-size` (with `--tensor-model-parallel-size`), or
`--pipeline-parallel-size` / `-p` as DeepSpeedExamples'
`training/pipeline_parallelism/train.py` spells it. Rank order:
`PipeDataParallelTopology` [pipe, data] or `PipeModelDataParallelTopology`
[pipe, data, model], last axis fastest (`deepspeed/runtime/pipe/topology.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bubblewatch.model.schedule import resolve_schedule
from bubblewatch.topology.training._args import TrainingArgsError, flag_values, int_value, text
from bubblewatch.topology.training.context import JobContext
from bubblewatch.topology.training.files import ConfigUnavailable
from bubblewatch.topology.training.layout import ParallelLayout
from bubblewatch.topology.training.megatron import MEGATRON_FLAGS

CONFIG_FLAGS = ("--deepspeed_config", "--deepscale_config")
_PP_FLAGS = (
    "--pipeline-model-parallel-size",
    "--pipeline-parallel-size",
    "--pipeline_parallel_size",
)
VERSIONS = "DeepSpeed 0.16 (deepspeed/runtime/config.py, runtime/pipe/)"


def uses_deepspeed(
    args: tuple[str, ...], launcher: str, launcher_options: Mapping[str, str | bool]
) -> bool:
    names = {a.partition("=")[0] for a in args}
    if names & {"--deepspeed", *CONFIG_FLAGS}:
        return True
    if launcher == "deepspeed":
        return True
    return launcher == "accelerate" and (
        launcher_options.get("--use_deepspeed") is True
        or "--deepspeed_config_file" in launcher_options
    )


def parse_deepspeed(ctx: JobContext, warnings: list[str]) -> ParallelLayout:
    where = ctx.where
    flags = flag_values(ctx.program.args)
    sources: dict[str, str] = {}
    notes: list[str] = []
    pp, pp_src = 1, ""
    for f in (*_PP_FLAGS, "-p"):
        v = text(flags, f)
        if v is not None:
            pp, pp_src = int_value(v, name=f, where=where), f
            break
    if pp_src == "-p":
        pp_src = "-p (the script's --pipeline-parallel-size, as DeepSpeedExamples spells it)"
    if not pp_src:
        pp_src = "no pipeline flag: taken as 1 (ZeRO data parallel)"
        notes.append(
            "pipeline stages are set in code (PipelineModule(num_stages=...)); none is given "
            "on the command line, so this is taken as data parallel"
        )
    sources["pp"] = pp_src
    tp_text = text(flags, "--tensor-model-parallel-size")
    tp = (
        1
        if tp_text is None
        else int_value(tp_text, name="--tensor-model-parallel-size", where=where)
    )
    sources["tp"] = "--tensor-model-parallel-size" if tp_text else "1"
    if ctx.world_size % (pp * tp):
        raise TrainingArgsError(
            f"world size {ctx.world_size} is not divisible by pp x tp = {pp * tp}",
            path=where,
            field=pp_src.split()[0] if pp > 1 else "--tensor-model-parallel-size",
        )
    dp = ctx.world_size // (pp * tp)
    sources["dp"] = "world size // (pp x tp)"
    megatron = bool({a.partition("=")[0] for a in ctx.program.args} & set(MEGATRON_FLAGS))
    mbs, gbs, gas, cfg_path = _batch(
        ctx, flags, dp, megatron=megatron, sources=sources, warnings=warnings
    )
    schedule = resolve_schedule("deepspeed", None, pp)
    return ParallelLayout(
        framework="deepspeed",
        launcher=ctx.launcher,
        world_size=ctx.world_size,
        pp=pp,
        tp=tp,
        dp=dp,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        micro_batches=gas,
        schedule=None if schedule is None else schedule.name,
        order=("tp", "dp", "pp"),
        num_layers=None,
        config_file=cfg_path,
        version_note=VERSIONS + (" with Megatron-DeepSpeed flags" if megatron else ""),
        sources=sources,
        notes=tuple(notes),
    )


def _batch(
    ctx: JobContext,
    flags: Mapping[str, str | bool],
    dp: int,
    *,
    megatron: bool,
    sources: dict[str, str],
    warnings: list[str],
) -> tuple[int | None, int | None, int | None, str | None]:
    """(micro batch, global batch, gradient accumulation steps, config path)."""
    path, key = None, None
    for f in CONFIG_FLAGS:
        if text(flags, f) is not None:
            path, key = text(flags, f), f
    if path is None and isinstance(ctx.launcher_options.get("--deepspeed_config_file"), str):
        path, key = str(ctx.launcher_options["--deepspeed_config_file"]), "--deepspeed_config_file"
    cfg: dict[str, Any] = {}
    if path is not None:
        try:
            doc = json.loads(ctx.files.read_text(path))
        except ConfigUnavailable as e:
            warnings.append(f"{ctx.where}: {key} {e}; batch sizes unknown")
        except json.JSONDecodeError as e:
            warnings.append(f"{path}:{e.lineno}: not JSON ({e.msg}); batch sizes unknown")
        else:
            if isinstance(doc, dict):
                cfg = doc
            else:
                warnings.append(f"{path}: a DeepSpeed config must be a JSON object")
    tb = _cfg_int(cfg, "train_batch_size", path, warnings)
    mb = _cfg_int(cfg, "train_micro_batch_size_per_gpu", path, warnings)
    gas = _cfg_int(cfg, "gradient_accumulation_steps", path, warnings)
    for name, v in (("global_batch_size", tb), ("micro_batch_size", mb), ("micro_batches", gas)):
        if v is not None:
            sources[name] = f"{path}: {_KEYS[name]}"
    if megatron:
        # Megatron-DeepSpeed passes --micro-batch-size / --global-batch-size itself.
        if mb is None and text(flags, "--micro-batch-size") is not None:
            mb = int_value(
                str(text(flags, "--micro-batch-size")), name="--micro-batch-size", where=ctx.where
            )
            sources["micro_batch_size"] = "--micro-batch-size"
        if tb is None and text(flags, "--global-batch-size") is not None:
            tb = int_value(
                str(text(flags, "--global-batch-size")), name="--global-batch-size", where=ctx.where
            )
            sources["global_batch_size"] = "--global-batch-size"
    # DeepSpeed's own resolution (_set_batch_related_parameters), world = dp.
    if tb is not None and mb is not None and gas is None:
        gas = max(tb // mb // dp, 1)
        sources["micro_batches"] = "train_batch_size // micro // dp"
    elif tb is not None and gas is not None and mb is None:
        mb = max(tb // dp // gas, 1)
    elif mb is not None and gas is not None and tb is None:
        tb = mb * gas * dp
    elif tb is not None and mb is None and gas is None:
        gas, mb = 1, max(tb // dp, 1)
        sources["micro_batches"] = "1 (only train_batch_size given)"
    elif mb is not None and tb is None and gas is None:
        tb, gas = mb * dp, 1
        sources["micro_batches"] = "1 (only the micro batch given)"
    if tb is not None and mb is not None and gas is not None and tb != mb * gas * dp:
        warnings.append(
            f"{path}: train_batch_size {tb} != micro {mb} x gas {gas} x dp {dp}; "
            "DeepSpeed would refuse it"
        )
    return mb, tb, gas, path


_KEYS = {
    "global_batch_size": "train_batch_size",
    "micro_batch_size": "train_micro_batch_size_per_gpu",
    "micro_batches": "gradient_accumulation_steps",
}


def _cfg_int(cfg: Mapping[str, Any], key: str, path: str | None, warnings: list[str]) -> int | None:
    v = cfg.get(key)
    if v is None or v == "auto":
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        warnings.append(f"{path}: {key} must be a positive integer, got {v!r}")
        return None
    return v
