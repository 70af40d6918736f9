"""A training job from its launch command given by hand (`--engine-cmdline`, rule tests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.topology.gpumap import visible_devices
from bubblewatch.topology.redact import redact_argv, redact_env
from bubblewatch.topology.training._args import python_program
from bubblewatch.topology.training.context import JobContext
from bubblewatch.topology.training.files import FileSource
from bubblewatch.topology.training.frameworks import parse_layout
from bubblewatch.topology.training.jobs import TrainingJob, redacted_layout
from bubblewatch.topology.training.launchers import recognise_launcher
from bubblewatch.topology.training.rankenv import rank_env


def training_from_cmdline(
    argv: Sequence[str],
    env: Mapping[str, str],
    gpus: Sequence[GpuInfo],
    *,
    files: FileSource,
    where: str = "--engine-cmdline",
) -> TrainingJob | None:
    """A training job from its launch command given by hand; None if it is not one.

    Ranks on this node follow the launcher's static numbering: node R of a
    launcher with L processes per node runs global ranks R*L .. R*L+L-1, local
    rank i on CUDA device i (the i-th CUDA_VISIBLE_DEVICES entry).
    """
    argv = list(redact_argv(argv))
    info = recognise_launcher(argv)
    program = info.program if info is not None else python_program(argv)
    if program is None:
        return None
    renv = rank_env(env)
    vis = visible_devices(renv.cuda_visible_devices, gpus)
    if info is not None and info.nproc_per_node is None and vis.indices:
        # deepspeed without --num_gpus, torchrun --nproc-per-node gpu: every visible GPU.
        info = replace(info, nproc_per_node=len(vis.indices))
    world = (info.world_size if info is not None else None) or renv.world_size
    if world is None and info is None:
        from bubblewatch.topology.training.nemo import world_from_overrides

        world = world_from_overrides(program.args)
    if world is None:
        if info is None:
            return None
        raise InputError(
            f"cannot tell the world size of this {info.name} command: it uses every GPU of "
            "the host and none is known here (give the process count, or run on the host)",
            path=where,
        )
    ctx = JobContext(
        program=program,
        env=env,
        files=files,
        world_size=world,
        launcher=info.name if info is not None else "none",
        where=where,
        launcher_options={} if info is None else dict(info.options),
    )
    warnings: list[str] = []
    layout = parse_layout(ctx, warnings)
    if info is None and layout.framework == "torch" and renv.world_size is None:
        return None  # a plain python command, not a training launch
    layout = replace(layout, notes=(*layout.notes, *warnings))
    per_node = (info.nproc_per_node if info is not None else None) or renv.local_world_size or world
    node = (info.node_rank if info is not None else None) or renv.node_rank or 0
    nnodes = (info.nnodes if info is not None else None) or max(world // per_node, 1)
    rank_gpus: dict[int, int] = {}
    for local in range(per_node):
        rank = node * per_node + local
        if rank >= world:
            break
        if vis.indices:
            if local < len(vis.indices):
                rank_gpus[rank] = vis.indices[local]
        elif renv.cuda_visible_devices is not None and local < len(renv.cuda_visible_devices):
            entry = renv.cuda_visible_devices[local]
            if entry.isdigit():
                rank_gpus[rank] = int(entry)
        else:
            rank_gpus[rank] = local
    master = None
    if info is not None and info.master_addr:
        master = f"{info.master_addr}:{info.master_port}" if info.master_port else info.master_addr
    return TrainingJob(
        layout=redacted_layout(layout, rank_gpus),
        rank_gpus=rank_gpus,
        argv=redact_argv(argv),
        env=redact_env(env),
        method="cmdline",
        node_rank=node,
        nnodes=nnodes,
        master=master,
        cuda_visible_devices=renv.cuda_visible_devices,
    )
