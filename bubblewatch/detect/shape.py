"""What the job is, in words: a pipeline PP x TP, GPUs in phase, independent groups, one GPU.

The report names a job by its shape, never "PP 1": data- or tensor-parallel
GPUs (FSDP too) compute in phase; a collective wait ties its holding and
waiting GPUs into one job whatever their grouping; GPU groups that neither
stagger nor wait on each other are independent jobs. Pure: a function of
what the detector decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHAPE_PIPELINE = "pipeline"
SHAPE_IN_PHASE = "in_phase"
SHAPE_INDEPENDENT = "independent_groups"
SHAPE_ONE_GPU = "one_gpu"
SHAPE_NO_WORK = "no_work"


def _gpus(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus)


def job_shape(
    *,
    pipeline_evidence: str,
    stages: Sequence[Sequence[int]],
    groups: Sequence[Sequence[int]] | None,
    idle_gpus: Sequence[int],
    waiting_together: Sequence[int],
    topology_given: bool,
) -> tuple[str, str]:
    """(kind, description) of the job.

    `stages`: the stages analysed; `groups`: the working GPU groups the
    detector inferred (None when a topology was given); `waiting_together`:
    the GPUs a collective wait ties into one job.
    """
    if pipeline_evidence != "none" and len(stages) > 1:
        if pipeline_evidence == "turn_taking":
            return SHAPE_PIPELINE, (
                f"layer-split model parallelism over {len(stages)} GPUs "
                f"({' -> '.join(_gpus(s) for s in stages)}): one process, the GPUs take turns "
                "(inferred from turn-taking)"
            )
        how = "topology given" if pipeline_evidence == "topology" else "inferred from the stagger"
        tp = max(len(s) for s in stages)
        return SHAPE_PIPELINE, f"pipeline PP {len(stages)} x TP {tp} ({how})"
    resting = [g for g in idle_gpus if g not in set(waiting_together)]
    idle = f"; GPU(s) {_gpus(resting)} idle" if resting else ""
    working: list[Sequence[int]] = list(stages if groups is None else groups)
    if waiting_together:
        tied = set(waiting_together)
        working = [sorted(tied | {g for grp in working if tied & set(grp) for g in grp})] + [
            grp for grp in working if not tied & set(grp)
        ]
    n = sum(len(g) for g in working)
    given = " (topology given)" if topology_given else ""
    if n == 0:
        return SHAPE_NO_WORK, f"no GPU works{idle}"
    if len(working) == 1 and n == 1:
        return SHAPE_ONE_GPU, f"one GPU works (GPU {_gpus(working[0])}){idle}"
    if len(working) == 1:
        how = "in one job, tied by collectives" if waiting_together else "working in phase"
        return (
            SHAPE_IN_PHASE,
            f"data- or tensor-parallel (or FSDP): {n} GPUs {how}, no pipeline{given}{idle}",
        )
    parts = " | ".join(_gpus(g) for g in working)
    return SHAPE_INDEPENDENT, f"{len(working)} independent GPU groups ({parts}), no pipeline{idle}"


def gpu_count_note(meta: dict[str, Any] | Any, n_gpus: int) -> str | None:
    """How the GPUs were counted, where the file does not number them (else None)."""
    how = meta.get("gpus_from") if hasattr(meta, "get") else None
    if not how:
        return None
    if how == "--gpus":
        return f"{n_gpus} GPUs, as given (--gpus)"
    return f"{n_gpus} GPUs, counted from the {how}: give --gpus N if that is wrong"


def is_pipeline(ev: Mapping[str, Any]) -> bool:
    """Whether the diagnosis judged the GPUs a pipeline (old evidence: by its stage count)."""
    shape = ev.get("job_shape")
    if shape is not None:
        return bool(shape == SHAPE_PIPELINE)
    return ev.get("pipeline_evidence") not in (None, "none")
