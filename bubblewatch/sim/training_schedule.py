"""One training step as intervals per stage: the pipeline schedule with its waits.

Each pipeline rank runs its operations (forward or backward of one
micro-batch through one of its model chunks) in the schedule's order; an
operation starts when the rank is free and its input has arrived (a forward
needs the previous virtual stage's forward of the same micro-batch, a
backward the next virtual stage's backward, each `send_s` later when it comes
from another rank). Virtual stage c*p + r is chunk c of rank r.

- GPipe runs all forwards, then the backwards in reverse order.
- 1F1B runs p - s - 1 warm-up forwards on rank s, then alternates one forward
  and one backward, then drains the backwards.
- Forward (layer-split inference) runs the forwards only.
- Interleaved 1F1B (v chunks per rank) follows Megatron-LM's
  `forward_backward_pipelining_with_interleaving`
  (`megatron/core/pipeline_parallel/schedules.py`): micro-batches in groups of
  p, each group through chunk 0, then chunk 1, ... (`get_schedule_table`);
  backwards take the chunks in reverse; rank r warms up with
  (p - r - 1) * 2 + (v - 1) * p forwards (all of them when that reaches v*m),
  then alternates.

With equal stage times GPipe and 1F1B leave each rank idle (p-1)/(m+p-1) of
the pipeline's makespan, interleaved 1F1B (p-1)/(v*m+p-1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.sim.training_spec import TrainingJobSpec

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

FORWARD, BACKWARD = 0, 1
Op = tuple[int, int, int]  # (kind, micro-batch, model chunk)


@dataclass(frozen=True)
class StepTemplate:
    """Compute intervals of one step relative to its start: stage, start, end, F/B, micro-batch."""

    stage: IntArray
    start_s: FloatArray
    end_s: FloatArray
    kind: IntArray
    micro_batch: IntArray
    makespan_s: float

    def busy_s(self, stage: int) -> float:
        sel = self.stage == stage
        return float(np.sum(self.end_s[sel] - self.start_s[sel]))


def rank_ops(schedule: str, p: int, m: int, rank: int, v: int = 1) -> list[Op]:
    """(kind, micro-batch, chunk) operations of pipeline rank `rank` in the schedule's order."""
    if schedule == "interleaved":
        return _interleaved_ops(p, m, v, rank)
    if schedule == "forward":  # inference: one forward per micro-batch, no backward
        return [(FORWARD, i, 0) for i in range(m)]
    if schedule in ("none", "gpipe"):
        return [(FORWARD, i, 0) for i in range(m)] + [(BACKWARD, i, 0) for i in reversed(range(m))]
    warm = min(p - rank - 1, m)
    ops = [(FORWARD, i, 0) for i in range(warm)]
    for j in range(m - warm):
        ops += [(FORWARD, warm + j, 0), (BACKWARD, j, 0)]
    ops += [(BACKWARD, i, 0) for i in range(m - warm, m)]
    return ops


def _interleaved_ops(p: int, m: int, v: int, rank: int) -> list[Op]:
    table: list[tuple[int, int]] = []  # (micro-batch, chunk) in Megatron's schedule-table order
    for first in range(0, m, p):
        group = range(first, m) if first + p >= m else range(first, first + p)
        table += [(mb, c) for c in range(v) for mb in group]
    total = v * m
    warm = min((p - rank - 1) * 2 + (v - 1) * p, total)
    fwd = [(FORWARD, mb, c) for mb, c in table]
    bwd = [(BACKWARD, mb, v - 1 - c) for mb, c in table]
    ops = fwd[:warm]
    for k in range(total - warm):
        ops += [fwd[warm + k], bwd[k]]
    return ops + bwd[total - warm :]


def step_template(job: TrainingJobSpec, slow: dict[int, float] | None = None) -> StepTemplate:
    """The schedule of one step with the job's stage times (see the module docstring).

    `slow` maps a stage to a factor its compute times are multiplied by (a
    throttled GPU in it).
    """
    p, m, v = job.pp_size, job.micro_batches, job.virtual_stages
    orders = [rank_ops(job.schedule, p, m, s, v) for s in range(p)]
    factor = slow or {}
    done: dict[tuple[int, int, int], float] = {}  # (virtual stage, kind, mb) -> end time
    free = [0.0] * p
    nxt = [0] * p
    rows: list[tuple[int, float, float, int, int]] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                kind, mb, chunk = orders[s][nxt[s]]
                vs = chunk * p + s
                dep = _dependency(vs, kind, mb, v * p)
                if dep is not None and dep not in done:
                    break
                hop = job.send_s if dep is not None and dep[0] % p != s else 0.0
                ready = 0.0 if dep is None else done[dep] + hop
                start = max(free[s], ready)
                unit = job.forward_s(s) * factor.get(s, 1.0) / v
                end = start + unit * (1.0 if kind == FORWARD else job.backward_factor)
                done[(vs, kind, mb)] = end
                free[s] = end
                rows.append((s, start, end, kind, mb))
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - every schedule above is deadlock-free
            raise RuntimeError(f"schedule {job.schedule} deadlocked")
    arr = np.array(rows, dtype=np.float64)
    return StepTemplate(
        stage=arr[:, 0].astype(np.int64),
        start_s=arr[:, 1],
        end_s=arr[:, 2],
        kind=arr[:, 3].astype(np.int64),
        micro_batch=arr[:, 4].astype(np.int64),
        makespan_s=float(arr[:, 2].max()),
    )


def _dependency(vs: int, kind: int, mb: int, n_virtual: int) -> tuple[int, int, int] | None:
    if kind == FORWARD:
        return None if vs == 0 else (vs - 1, FORWARD, mb)
    if vs == n_virtual - 1:
        return (vs, FORWARD, mb)
    return (vs + 1, BACKWARD, mb)
