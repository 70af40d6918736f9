"""torchtitan: the parallel layout from its TOML job config and `--section.key` overrides.

Keys as `torchtitan/config/job_config.py` (0.2.x; `config_manager.py` in
0.1.0) defines them: `[parallelism]` `pipeline_parallel_degree` (1),
`pipeline_parallel_schedule` ("1F1B"), `pipeline_parallel_microbatch_size`
(1), `pipeline_parallel_layers_per_stage`, `pipeline_parallel_schedule_csv`,
`tensor_parallel_degree`, `context_parallel_degree`,
`data_parallel_replicate_degree` (1), `data_parallel_shard_degree` (-1: the
rest of the world), `expert_parallel_degree`; `[training]`
`local_batch_size` (8), `global_batch_size` (-1: local x dp). The config
file is `--job.config_file`; overrides are `--parallelism.pipeline_parallel_degree 4`
(tyro; `-` and `_` both accepted here). m = local_batch_size //
pipeline_parallel_microbatch_size (`build_pipeline_schedule`, 0.2.x).
torchtitan 0.3 configures jobs in Python (`--module M --config C`): only the
overrides on the command line are read then.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from bubblewatch.model.schedule import resolve_schedule
from bubblewatch.topology.training._args import TrainingArgsError, flag_values
from bubblewatch.topology.training.context import JobContext
from bubblewatch.topology.training.files import ConfigUnavailable
from bubblewatch.topology.training.layout import ParallelLayout

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

VERSIONS = "torchtitan 0.1.0-0.2.2 (torchtitan/config/job_config.py)"
_DEFAULTS: dict[str, dict[str, Any]] = {
    "parallelism": {
        "pipeline_parallel_degree": 1,
        "pipeline_parallel_schedule": "1F1B",
        "pipeline_parallel_microbatch_size": 1,
        "pipeline_parallel_layers_per_stage": None,
        "pipeline_parallel_schedule_csv": "",
        "tensor_parallel_degree": 1,
        "context_parallel_degree": 1,
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": -1,
        "expert_parallel_degree": 1,
    },
    "training": {"local_batch_size": 8, "global_batch_size": -1},
}


def looks_like_torchtitan(module: str | None, script: str | None, args: tuple[str, ...]) -> bool:
    if module is not None and module.startswith("torchtitan"):
        return True
    if script is not None and script.replace("\\", "/").endswith("torchtitan/train.py"):
        return True
    return any(
        a.startswith(("--job.config_file", "--job.config-file", "--parallelism.")) for a in args
    )


def parse_torchtitan(ctx: JobContext, warnings: list[str]) -> ParallelLayout:
    where = ctx.where
    flags = flag_values(ctx.program.args)
    values: dict[str, dict[str, Any]] = {k: dict(v) for k, v in _DEFAULTS.items()}
    sources: dict[str, str] = {}
    cfg_path = _text(flags, "--job.config_file") or _text(flags, "--job.config-file")
    notes: list[str] = []
    if cfg_path is not None:
        _merge_toml(ctx, cfg_path, values, sources, warnings)
    elif "--module" in flags or "--config" in flags:
        notes.append("torchtitan Python config (--module/--config) is not read: overrides only")
    for name, value in flags.items():
        if not name.startswith("--") or "." not in name or not isinstance(value, str):
            continue
        section, _, key = name[2:].partition(".")
        key = key.replace("-", "_")
        if section in values and key in values[section]:
            values[section][key] = value
            sources[f"{section}.{key}"] = name
    p = values["parallelism"]

    def get(key: str, minimum: int = 1) -> int:
        return _int(p[key], f"parallelism.{key}", where, minimum)

    pp, tp, cp = (
        get("pipeline_parallel_degree"),
        get("tensor_parallel_degree"),
        get("context_parallel_degree"),
    )
    rep = get("data_parallel_replicate_degree")
    shard = get("data_parallel_shard_degree", -1)
    if shard == -1:
        shard = ctx.world_size // max(rep * cp * tp * pp, 1)
    if rep * shard * cp * tp * pp != ctx.world_size:
        raise TrainingArgsError(
            f"dp_replicate {rep} x dp_shard {shard} x cp {cp} x tp {tp} x pp {pp} is not the "
            f"world size {ctx.world_size} (torchtitan's ParallelDims asserts it)",
            path=where,
            field="parallelism.data_parallel_shard_degree",
        )
    local = _int(values["training"]["local_batch_size"], "training.local_batch_size", where, 1)
    micro = get("pipeline_parallel_microbatch_size")
    if local % micro:
        warnings.append(
            f"{where}: training.local_batch_size {local} is not a multiple of "
            f"parallelism.pipeline_parallel_microbatch_size {micro}; torchtitan would refuse it"
        )
    global_bs = _int(
        values["training"]["global_batch_size"], "training.global_batch_size", where, -1
    )
    dp = rep * shard
    name = str(p["pipeline_parallel_schedule"])
    if p["pipeline_parallel_schedule_csv"]:
        notes.append("a schedule CSV is given: its bubble is not modelled")
    if p["pipeline_parallel_layers_per_stage"] is not None:
        notes.append(
            "pipeline_parallel_layers_per_stage is set: stages per rank depend on the model's "
            "layer count, taken as the schedule's default"
        )
    schedule = resolve_schedule("torchtitan", name, pp)
    if schedule is None:
        warnings.append(f"{where}: unknown pipeline_parallel_schedule {name!r}")
    return ParallelLayout(
        framework="torchtitan",
        launcher=ctx.launcher,
        world_size=ctx.world_size,
        pp=pp,
        tp=tp,
        dp=dp,
        cp=cp,
        ep=get("expert_parallel_degree"),
        virtual_stages=1 if schedule is None or pp == 1 else schedule.virtual_stages,
        micro_batch_size=micro,
        global_batch_size=global_bs if global_bs > 0 else local * dp,
        micro_batches=max(local // micro, 1),
        schedule=name if schedule is None else schedule.name,
        order=("tp", "cp", "dp", "pp"),
        config_file=cfg_path,
        version_note=VERSIONS,
        sources=sources,
        notes=tuple(notes),
    )


def _merge_toml(
    ctx: JobContext,
    path: str,
    values: dict[str, dict[str, Any]],
    sources: dict[str, str],
    warnings: list[str],
) -> None:
    try:
        doc = tomllib.loads(ctx.files.read_text(path))
    except ConfigUnavailable as e:
        warnings.append(f"{ctx.where}: --job.config_file {e}; using torchtitan's defaults")
        return
    except tomllib.TOMLDecodeError as e:
        warnings.append(f"{path}: not TOML ({e}); using torchtitan's defaults")
        return
    for section, table in values.items():
        given = doc.get(section)
        if not isinstance(given, dict):
            continue
        for key in table:
            if key in given:
                table[key] = given[key]
                sources[f"{section}.{key}"] = f"{path} [{section}] {key}"
    old = doc.get("training", {})
    if isinstance(old, dict) and "batch_size" in old and "local_batch_size" not in old:
        values["training"]["local_batch_size"] = old["batch_size"]
        sources["training.local_batch_size"] = f"{path} [training] batch_size"


def _text(flags: Mapping[str, str | bool], name: str) -> str | None:
    v = flags.get(name)
    return v if isinstance(v, str) else None


def _int(v: Any, name: str, where: str, minimum: int) -> int:
    if isinstance(v, bool):
        raise TrainingArgsError(f"{name} expects an integer, got {v!r}", path=where, field=name)
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise TrainingArgsError(
            f"{name} expects an integer, got {v!r}", path=where, field=name
        ) from None
    if n < minimum or n == 0:
        raise TrainingArgsError(
            f"{name} must be >= {max(minimum, 1)}, got {n}", path=where, field=name
        )
    return n
