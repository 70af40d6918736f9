"""Is a training pipeline as good as its schedule allows? If not, what costs the rest.

Pure arithmetic on per-stage window figures. The measured bubble is the
share of stage-time not doing useful work, 1 - mean stage occupancy (over
whole steps this is 1 - mean busy time per step / step period). The
schedule's bubble assumes equal stages and free communication; the excess
over it is split three ways:

- **imbalance**: with busy times b_s per step and M = v*m model-chunk passes
  per rank, the slowest stage sets the pace of the steady phase and fill and
  drain take one pass through every stage, so a step lasts about
  (sum b + (M-1) max b) / M and the bubble is 1 - mean b / that (equal b give
  the schedule's own (p-1)/(v*m+p-1)). The part above the schedule's bubble is
  the slow stage's doing: a throttled GPU in it, the first stage's embedding,
  the last stage's output layer and loss, or more layers.
- **host waits**: time a stage runs no kernel at all (utilization.gpu below
  100%): a pipeline rank waiting on another stage spins in its receive, so
  no kernel means the rank waits on its own host (the data loader on the
  first stage, which reads the batches; CPU work anywhere). A synchronous
  pipeline waits for its slowest rank, so the largest such share counts.
- **communication**: the rest, where the stages hold kernels but do no work
  beyond what the schedule and the imbalance explain: exposed point-to-point
  transfers between stages and data-parallel gradient reduction.

The job is as good as its schedule when the excess is within the tolerance
(`DetectOptions.schedule_tolerance_ratio`, widened to two standard errors of
the measured bubble's variation over the window).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.model.schedule import PipelineSchedule

FloatArray = npt.NDArray[np.float64]

# A host wait is the data loader's when the first (or last) stage shows this many times
# the others' mean share with no kernel (and at least 2 points more).
LOADER_CONCENTRATION = 2.0


@dataclass(frozen=True)
class Judgement:
    """The measured bubble against the schedule's, and what the difference comes from."""

    expected_bubble_ratio: float
    measured_bubble_ratio: float
    tolerance_ratio: float
    imbalance_bubble_ratio: float  # the schedule's bubble with the measured stage times
    imbalance_ratio: float  # the excess that imbalance explains (>= 0)
    host_wait_ratio: float | None  # ... that ranks with no kernel explain
    communication_ratio: float  # ... the rest
    as_good: bool
    cause: str | None
    cause_stage: int | None
    formula: str

    @property
    def excess_ratio(self) -> float:
        return self.measured_bubble_ratio - self.expected_bubble_ratio


def imbalance_bubble(busy: FloatArray, passes: float) -> float:
    """Bubble of a fill-and-drain schedule with stage busy times `busy` and `passes` = v*m."""
    b = np.asarray(busy, dtype=np.float64)
    top = float(b.max())
    if top <= 0:
        return 0.0
    if not np.isfinite(passes):
        return 1.0 - float(b.mean()) / top  # no fill or drain: the slowest stage sets the pace
    step = (float(b.sum()) + (passes - 1.0) * top) / passes
    return 1.0 - float(b.mean()) / step


def judge(
    schedule: PipelineSchedule,
    occupancy: FloatArray,
    *,
    kernel_busy: FloatArray | None,
    throttled_stages: Collection[int] = (),
    sigma_ratio: float = 0.0,
    tolerance_ratio: float = 0.05,
) -> Judgement:
    """The measured bubble of stage occupancies (P,) against what `schedule` allows."""
    occ = np.clip(np.asarray(occupancy, dtype=np.float64), 0.0, 1.0)
    p = occ.size
    exp = schedule.expectation(p)
    expected = exp.bubble_ratio
    measured = 1.0 - float(occ.mean())
    tol = max(tolerance_ratio, 2.0 * sigma_ratio)
    with_imbalance = max(imbalance_bubble(occ, schedule.effective_micro_batches), expected)
    imbalance = with_imbalance - expected
    host: float | None = None
    host_stage: int | None = None
    if kernel_busy is not None and np.isfinite(kernel_busy).all():
        no_kernel = np.clip(1.0 - np.asarray(kernel_busy, dtype=np.float64), 0.0, 1.0)
        host_stage = int(np.argmax(no_kernel))
        host = float(no_kernel[host_stage])
    rest = measured - with_imbalance - (host or 0.0)
    comm = max(rest, 0.0)
    as_good = measured - expected <= tol
    cause: str | None = None
    stage: int | None = None
    if not as_good:
        parts = {"imbalance": imbalance, "host": host or 0.0, "communication": comm}
        which = max(parts, key=lambda k: parts[k])
        if which == "imbalance":
            stage = int(np.argmax(occ))
            cause = _slow_stage_cause(stage, p, throttled_stages)
        elif which == "host" and host_stage is not None and kernel_busy is not None:
            stage = host_stage
            cause = _host_cause(stage, p, 1.0 - np.asarray(kernel_busy, dtype=np.float64))
        else:
            cause = "communication_wait"
    return Judgement(
        expected_bubble_ratio=expected,
        measured_bubble_ratio=measured,
        tolerance_ratio=tol,
        imbalance_bubble_ratio=with_imbalance,
        imbalance_ratio=imbalance,
        host_wait_ratio=host,
        communication_ratio=comm,
        as_good=as_good,
        cause=cause,
        cause_stage=stage,
        formula=exp.formula,
    )


def _slow_stage_cause(stage: int, p: int, throttled: Collection[int]) -> str:
    if stage in throttled:
        return "throttled_stage"
    if stage == 0:
        return "heavy_first_stage"
    if stage == p - 1:
        return "heavy_last_stage"
    return "slow_stage"


def _host_cause(stage: int, p: int, no_kernel: FloatArray) -> str:
    others = np.delete(no_kernel, stage)
    base = float(others.mean()) if others.size else 0.0
    concentrated = no_kernel[stage] >= max(LOADER_CONCENTRATION * base, base + 0.02)
    return "data_loader_stall" if concentrated and stage in (0, p - 1) else "host_wait"


def describe(j: Judgement) -> str:
    """One sentence on what costs the bubble above the schedule's."""
    s = j.cause_stage
    return {
        "slow_stage": f"stage {s} is the slowest and holds the others back",
        "throttled_stage": f"stage {s} runs on a throttled GPU and holds the others back",
        "heavy_first_stage": f"the first stage (stage {s}, with the embedding) is the slowest",
        "heavy_last_stage": f"the last stage (stage {s}, with the output layer and loss) is "
        "the slowest",
        "data_loader_stall": f"stage {s} runs no kernel {j.host_wait_ratio or 0:.0%} of the "
        "time while the others wait: its data loader (or host) stalls the pipeline",
        "host_wait": f"ranks run no kernel up to {j.host_wait_ratio or 0:.0%} of the time: "
        "they wait on their host (CPU work, data loading)",
        "communication_wait": "stages wait in transfers beyond the schedule's bubble: exposed "
        "point-to-point sends or data-parallel gradient reduction",
    }.get(j.cause or "", "")
