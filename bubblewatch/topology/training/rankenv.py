"""A rank's identity from its process environment, as each launcher sets it.

torch's elastic agent (torchrun, accelerate): RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK (the node), GROUP_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID. DeepSpeed's launcher: RANK, LOCAL_RANK,
WORLD_SIZE, CROSS_RANK (node), CROSS_SIZE (nodes), LOCAL_SIZE. Slurm tasks:
SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID, SLURM_NNODES,
SLURM_JOB_ID, SLURM_STEP_ID. The first of each list that is set wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_RANK = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
_LOCAL_RANK = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
_WORLD = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")
_LOCAL_WORLD = ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
_NODE = ("GROUP_RANK", "CROSS_RANK", "NODE_RANK", "SLURM_NODEID")
_NODES = ("GROUP_WORLD_SIZE", "CROSS_SIZE", "SLURM_NNODES")


@dataclass(frozen=True)
class RankEnv:
    """What a rank's environment says about it; None where it says nothing usable."""

    rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    nnodes: int | None
    master_addr: str | None
    master_port: int | None
    run_id: str | None
    cuda_visible_devices: tuple[str, ...] | None
    problems: tuple[str, ...] = ()

    @property
    def is_rank(self) -> bool:
        """A process the launcher started as one rank of a job."""
        return self.rank is not None or (
            self.local_rank is not None and self.world_size is not None
        )


def rank_env(env: Mapping[str, str]) -> RankEnv:
    problems: list[str] = []

    def first_int(names: tuple[str, ...], minimum: int) -> int | None:
        for n in names:
            if n in env:
                try:
                    v = int(env[n].strip())
                except ValueError:
                    problems.append(f"{n}={env[n]!r} is not an integer")
                    return None
                if v < minimum:
                    problems.append(f"{n}={v} is below {minimum}")
                    return None
                return v
        return None

    port = first_int(("MASTER_PORT",), 0)
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id is None and "SLURM_JOB_ID" in env:
        run_id = f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    return RankEnv(
        rank=first_int(_RANK, 0),
        local_rank=first_int(_LOCAL_RANK, 0),
        world_size=first_int(_WORLD, 1),
        local_world_size=first_int(_LOCAL_WORLD, 1),
        node_rank=first_int(_NODE, 0),
        nnodes=first_int(_NODES, 1),
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=port,
        run_id=run_id,
        cuda_visible_devices=None
        if cvd is None
        else tuple(x.strip() for x in cvd.split(",") if x.strip()),
        problems=tuple(problems),
    )
