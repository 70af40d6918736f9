"""A training pipeline in `diagnose`: its steps, its bubble against the schedule, the evidence.

Only with a schedule (a discovered layout's, or one given on the command line); see
docs/training.md, "The measured side".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bubblewatch.detect.context import rounded
from bubblewatch.detect.levels import LEVEL_ASSUMED, SIGNAL_POWER, SIGNAL_SM, Levels
from bubblewatch.detect.pipeline_findings import slow_gpus
from bubblewatch.detect.schedule_judge import Judgement, judge
from bubblewatch.detect.stats import WindowStats
from bubblewatch.detect.steps import Steps, measure_steps
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import EvidenceValue
from bubblewatch.model.schedule import PipelineSchedule

_ASSUMED = (
    "no sample shows a stage computing flat out (compute level assumed): the samples average "
    "work and waiting, so the bubble is not judged; sample every 100-200 ms"
)
_POWER = (
    "occupancy from power only: the driver's power readings average a stage's work and "
    "waiting (nvidia-smi's power.draw over 1 s), so the bubble is not judged"
)


@dataclass(frozen=True)
class TrainingView:
    """What the window shows of a training pipeline: steps, judgement, or why it is unjudged."""

    steps: Steps
    judgement: Judgement | None
    unjudged: str | None = None


def training_view(
    st: WindowStats,
    schedule: PipelineSchedule | None,
    t_s: np.ndarray,
    levels: Levels,
    opts: DetectOptions,
) -> TrainingView | None:
    """A training pipeline's steps and its bubble against the schedule (None without one).

    The measured bubble is only as good as the compute level: where SM activity never
    shows a stage computing flat out (the level is assumed), samples average work and
    waiting and the bubble is not judged; nor from power alone (in the simulated suite
    nvidia-smi's 1 s power reads a 43% bubble as 24%). A stage holding a GPU that runs
    slow (throttle reasons, or clocks below the others') is a throttled stage.
    """
    if schedule is None or st.pp_size < 2:
        return None
    steps = measure_steps(t_s, st.occupancy_t, st.step_s)
    if levels.signal == SIGNAL_SM and LEVEL_ASSUMED in levels.compute_level_source:
        return TrainingView(steps, None, _ASSUMED)
    if levels.signal == SIGNAL_POWER:
        return TrainingView(steps, None, _POWER)
    judgement = judge(
        schedule,
        st.occupancy,
        kernel_busy=st.kernel_busy,
        throttled_stages={stage for _, stage, _, _, _ in slow_gpus(st, opts)},
        sigma_ratio=st.concurrency_sigma_time / st.pp_size,
        tolerance_ratio=opts.schedule_tolerance_ratio,
    )
    return TrainingView(steps, judgement)


def training_evidence(view: TrainingView | None) -> dict[str, EvidenceValue]:
    """The contract's training keys (EVIDENCE_KEYS): None for what is not known."""
    j = None if view is None else view.judgement
    steps = None if view is None else view.steps
    period = None if steps is None else steps.period
    waves = None if steps is None else steps.waves
    busy = None if steps is None else steps.stage_busy_s
    return {
        "expected_formula": None if j is None else j.formula,
        "measured_bubble_ratio": None if j is None else rounded(j.measured_bubble_ratio),
        "schedule_excess_ratio": None if j is None else rounded(j.excess_ratio),
        "schedule_judgement": None if j is None else "as_good" if j.as_good else "below",
        "excess_cause": None if j is None else j.cause,
        "excess_stage": None if j is None else j.cause_stage,
        "imbalance_bubble_ratio": None if j is None else rounded(j.imbalance_bubble_ratio),
        "step_period_s": None if period is None else rounded(period.period_s, 4),
        "stage_busy_s": None if busy is None else [rounded(b, 4) for b in busy],
        "wave_order": None if waves is None else list(waves.order),
        "wave_rank_correlation": None if waves is None else rounded(waves.rank_correlation),
    }


def step_extras(view: TrainingView) -> dict[str, EvidenceValue]:
    """How the step period and waves were found (beyond the evidence contract)."""
    p, w = view.steps.period, view.steps.waves
    return {
        "step_dispersion_ratio": None if p is None else rounded(p.dispersion),
        "step_amplitude_ratio": None if p is None else rounded(p.amplitude),
        "steps_in_window": None if p is None else rounded(p.n_steps, 1),
        "wave_position": None if w is None else [rounded(x) for x in w.position],
        "wave_collinearity_ratio": None if w is None else rounded(w.collinearity),
        "schedule_unjudged": view.unjudged,
    }
