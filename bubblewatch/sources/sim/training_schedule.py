"""One training step as intervals per stage: the pipeline schedule (GPipe, 1F1B) with its waits.

Each stage runs its operations (forward or backward of one micro-batch) in
the schedule's order; an operation starts when the stage is free and its
input has arrived (a forward needs the previous stage's forward of the same
micro-batch, a backward the next stage's backward, each `send_s` later).
GPipe runs all forwards, then the backwards in reverse order; 1F1B runs
p - s - 1 warm-up forwards on stage s, then alternates one forward and one
backward, then drains the backwards. With equal stage times both leave each
stage idle (p - 1) / (m + p - 1) of the pipeline's makespan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.sources.sim.training_spec import TrainingJobSpec

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

FORWARD, BACKWARD = 0, 1


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


def stage_order(schedule: str, p: int, m: int, stage: int) -> list[tuple[int, int]]:
    """(kind, micro-batch) operations of `stage` in the order the schedule runs them."""
    if schedule in ("none", "gpipe"):
        return [(FORWARD, i) for i in range(m)] + [(BACKWARD, i) for i in reversed(range(m))]
    warm = min(p - stage - 1, m)
    ops = [(FORWARD, i) for i in range(warm)]
    for j in range(m - warm):
        ops += [(FORWARD, warm + j), (BACKWARD, j)]
    ops += [(BACKWARD, i) for i in range(m - warm, m)]
    return ops


def step_template(job: TrainingJobSpec) -> StepTemplate:
    """The schedule of one step with the job's stage times (see the module docstring)."""
    p, m = job.pp_size, job.micro_batches
    orders = [stage_order(job.schedule, p, m, s) for s in range(p)]
    done: dict[tuple[int, int, int], float] = {}  # (stage, kind, mb) -> end time
    free = [0.0] * p
    nxt = [0] * p
    rows: list[tuple[int, float, float, int, int]] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                kind, mb = orders[s][nxt[s]]
                dep = _dependency(s, kind, mb, p)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (job.send_s if dep[0] != s else 0.0)
                start = max(free[s], ready)
                dur = job.forward_s(s) * (1.0 if kind == FORWARD else job.backward_factor)
                end = start + dur
                done[(s, kind, mb)] = end
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


def _dependency(stage: int, kind: int, mb: int, p: int) -> tuple[int, int, int] | None:
    if kind == FORWARD:
        return None if stage == 0 else (stage - 1, FORWARD, mb)
    if stage == p - 1:
        return (stage, FORWARD, mb)
    return (stage + 1, BACKWARD, mb)


def bubble_ratio(template: StepTemplate, p: int) -> float:
    """Share of stage-time idle within the makespan: (p - 1) / (m + p - 1) for equal stages."""
    busy = sum(template.busy_s(s) for s in range(p))
    return 1.0 - busy / (p * template.makespan_s)
