"""Megatron-LM: the parallel layout from its own flags.

Flags as `megatron/training/arguments.py` defines them (argparse,
`allow_abbrev=False`), checked in Megatron-LM core_v0.9.0 and core_v0.14.0:
`--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
`--context-parallel-size`, `--expert-model-parallel-size` (all default 1),
`--micro-batch-size`, `--global-batch-size` (default micro x dp),
`--num-layers`, `--num-layers-per-virtual-pipeline-stage`,
`--num-virtual-stages-per-pipeline-rank` (0.14), `--decoder-first-pipeline-num-layers`,
`--decoder-last-pipeline-num-layers`, `--account-for-embedding-in-pipeline-split`
and `--account-for-loss-in-pipeline-split` (0.14), `--use-tp-pp-dp-mapping`,
`--rampup-batch-size`. `validate_args` computes dp = world // (tp * pp * cp)
and the virtual pipeline size as (layers / pp) / layers-per-virtual-stage
(+1 layer for each account-for flag); the number of micro-batches is
global // (micro * dp) (`ConstantNumMicroBatchesCalculator`).
"""

from __future__ import annotations

from collections.abc import Mapping

from bubblewatch.model.schedule import resolve_schedule
from bubblewatch.topology.training._args import TrainingArgsError, flag_values, int_value, text
from bubblewatch.topology.training.context import JobContext
from bubblewatch.topology.training.layout import ParallelLayout

MEGATRON_FLAGS = (
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--micro-batch-size",
    "--global-batch-size",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
)
VERSIONS = "Megatron-LM core_v0.9.0-core_v0.14.0 (megatron/training/arguments.py)"


def looks_like_megatron(args: tuple[str, ...], script: str) -> bool:
    names = {a.partition("=")[0] for a in args}
    return bool(names & set(MEGATRON_FLAGS)) or script.startswith("pretrain_")


def megatron_sizes(
    flags: Mapping[str, str | bool], world: int, where: str
) -> tuple[dict[str, int], dict[str, str]]:
    """tp, pp, cp, ep and dp from Megatron's flags, with the flag that set each."""
    sizes: dict[str, int] = {}
    sources: dict[str, str] = {}
    for key, flag in (
        ("tp", "--tensor-model-parallel-size"),
        ("pp", "--pipeline-model-parallel-size"),
        ("cp", "--context-parallel-size"),
        ("ep", "--expert-model-parallel-size"),
    ):
        v = text(flags, flag)
        sizes[key] = 1 if v is None else int_value(v, name=flag, where=where)
        sources[key] = flag if v is not None else f"{flag} default 1"
    model = sizes["tp"] * sizes["pp"] * sizes["cp"]
    if world % model:
        raise TrainingArgsError(
            f"world size {world} is not divisible by tp x pp x cp = {model} "
            "(Megatron's validate_args asserts it)",
            path=where,
            field="--pipeline-model-parallel-size",
        )
    sizes["dp"] = world // model
    sources["dp"] = "world size // (tp x pp x cp)"
    return sizes, sources


def parse_megatron(
    ctx: JobContext, warnings: list[str], framework: str = "megatron"
) -> ParallelLayout:
    where = ctx.where
    flags = flag_values(ctx.program.args)
    sizes, sources = megatron_sizes(flags, ctx.world_size, where)
    tp, pp, cp, dp = sizes["tp"], sizes["pp"], sizes["cp"], sizes["dp"]
    notes: list[str] = []

    def opt(flag: str) -> int | None:
        v = text(flags, flag)
        return None if v is None else int_value(v, name=flag, where=where)

    mbs = opt("--micro-batch-size")
    gbs = opt("--global-batch-size")
    if mbs is not None:
        sources["micro_batch_size"] = "--micro-batch-size"
    if gbs is None and mbs is not None:
        gbs = mbs * dp
        sources["global_batch_size"] = "--micro-batch-size x dp (--global-batch-size not given)"
    elif gbs is not None:
        sources["global_batch_size"] = "--global-batch-size"
    m = None
    if mbs is not None and gbs is not None:
        if gbs % (mbs * dp):
            warnings.append(
                f"{where}: --global-batch-size {gbs} is not a multiple of micro-batch size "
                f"{mbs} x dp {dp}; Megatron would refuse it"
            )
        m = max(gbs // (mbs * dp), 1)
        sources["micro_batches"] = "global // (micro x dp)"
    if "--rampup-batch-size" in flags:
        notes.append("--rampup-batch-size: m grows to the figure shown during the ramp-up")
    layers = opt("--num-layers")
    first, last = (
        opt("--decoder-first-pipeline-num-layers"),
        opt("--decoder-last-pipeline-num-layers"),
    )
    v = _virtual_stages(flags, pp, layers, where, notes)
    if v > 1:
        sources["virtual_stages"] = (
            "--num-virtual-stages-per-pipeline-rank"
            if "--num-virtual-stages-per-pipeline-rank" in flags
            else "(--num-layers / pp) / --num-layers-per-virtual-pipeline-stage"
        )
    order = (
        ("tp", "cp", "pp", "dp") if flags.get("--use-tp-pp-dp-mapping") is True else AXES_DEFAULT
    )
    schedule = resolve_schedule(framework, None, pp, v)
    return ParallelLayout(
        framework=framework,
        launcher=ctx.launcher,
        world_size=ctx.world_size,
        pp=pp,
        tp=tp,
        dp=dp,
        cp=cp,
        ep=sizes["ep"],
        virtual_stages=v,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        micro_batches=m,
        schedule=None if schedule is None else schedule.name,
        order=order,
        num_layers=layers,
        first_stage_layers=first,
        last_stage_layers=last,
        version_note=VERSIONS,
        sources=sources,
        notes=tuple(notes),
    )


AXES_DEFAULT = ("tp", "cp", "dp", "pp")


def _virtual_stages(
    flags: Mapping[str, str | bool], pp: int, layers: int | None, where: str, notes: list[str]
) -> int:
    per_rank = text(flags, "--num-virtual-stages-per-pipeline-rank")
    if per_rank is not None:
        v = int_value(per_rank, name="--num-virtual-stages-per-pipeline-rank", where=where)
        return v if pp > 1 else 1
    lps_text = text(flags, "--num-layers-per-virtual-pipeline-stage")
    if lps_text is None:
        if text(flags, "--pipeline-model-parallel-layout") is not None:
            notes.append("--pipeline-model-parallel-layout is not read: virtual stages taken as 1")
        return 1
    lps = int_value(lps_text, name="--num-layers-per-virtual-pipeline-stage", where=where)
    if layers is None:
        notes.append("--num-layers unknown: the virtual pipeline size cannot be computed")
        return 1
    total = layers + sum(
        1
        for f in (
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
        )
        if flags.get(f) is True
    )
    if total % pp or (total // pp) % lps:
        raise TrainingArgsError(
            f"layers per stage {total}/{pp} is not a multiple of {lps} "
            "(Megatron's validate_args asserts it)",
            path=where,
            field="--num-layers-per-virtual-pipeline-stage",
        )
    v = (total // pp) // lps
    return v if pp > 1 else 1
