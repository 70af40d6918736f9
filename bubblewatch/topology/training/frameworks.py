"""Which framework a training program is, and its layout from that framework's parser."""

from __future__ import annotations

from bubblewatch.topology.training.context import JobContext
from bubblewatch.topology.training.deepspeed import parse_deepspeed, uses_deepspeed
from bubblewatch.topology.training.layout import ParallelLayout
from bubblewatch.topology.training.megatron import looks_like_megatron, parse_megatron
from bubblewatch.topology.training.nemo import looks_like_nemo, parse_nemo
from bubblewatch.topology.training.torchtitan import looks_like_torchtitan, parse_torchtitan


def parse_layout(ctx: JobContext, warnings: list[str]) -> ParallelLayout:
    """The job's layout, read the way its framework reads its flags and config files.

    A program no framework claims is plain torch.distributed (DDP or FSDP):
    every rank a data-parallel replica, no pipeline.
    """
    prog = ctx.program
    args = prog.args
    if looks_like_torchtitan(prog.module, prog.script, args):
        return parse_torchtitan(ctx, warnings)
    if looks_like_nemo(prog.module, prog.script, args):
        return parse_nemo(ctx, warnings)
    if uses_deepspeed(args, ctx.launcher, ctx.launcher_options):
        return parse_deepspeed(ctx, warnings)
    if looks_like_megatron(args, prog.name):
        return parse_megatron(ctx, warnings)
    return ParallelLayout(
        framework="torch",
        launcher=ctx.launcher,
        world_size=ctx.world_size,
        dp=ctx.world_size,
        order=("dp",),
        sources={"dp": "world size (no framework flags: data parallel)"},
    )
