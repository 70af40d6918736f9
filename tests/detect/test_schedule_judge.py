"""The measured bubble against the schedule's (detect/schedule_judge.py), on figures by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bubblewatch.detect.schedule_judge import describe, imbalance_bubble, judge
from bubblewatch.model.schedule import PipelineSchedule

ONE_F_ONE_B_M4 = PipelineSchedule("1f1b", 4)


@pytest.mark.parametrize(("p", "passes"), [(4, 4), (4, 16), (8, 3), (2, 8)])
def test_equal_stages_give_the_schedules_own_bubble(p: int, passes: int) -> None:
    assert imbalance_bubble(np.full(p, 0.6), passes) == pytest.approx((p - 1) / (passes + p - 1))


def test_a_slow_stage_paces_the_steady_phase() -> None:
    # per micro-batch 1, 1, 1.5, 1 over m=4: step (4.5 + 3 * 1.5) = 9 units, mean busy 4.5
    assert imbalance_bubble(np.array([1.0, 1.0, 1.5, 1.0]), 4) == pytest.approx(0.5)
    # no fill or drain (zero bubble): only the slowest stage's pace counts
    assert imbalance_bubble(np.array([1.0, 1.0, 1.5, 1.0]), math.inf) == pytest.approx(0.25)


def test_as_good_as_the_schedule_within_the_tolerance() -> None:
    occ = np.full(4, 1 - 0.45)  # 45% against 3/7 = 42.9%
    j = judge(ONE_F_ONE_B_M4, occ, kernel_busy=np.ones(4))
    assert j.as_good and j.cause is None
    assert j.expected_bubble_ratio == pytest.approx(3 / 7)
    assert j.measured_bubble_ratio == pytest.approx(0.45)
    assert j.formula == "(p-1)/(m+p-1) = 3/(4+3) = 0.429"
    wide = judge(ONE_F_ONE_B_M4, np.full(4, 0.5), kernel_busy=None, sigma_ratio=0.05)
    assert wide.tolerance_ratio == pytest.approx(0.1) and wide.as_good  # 2 sigma wins


@pytest.mark.parametrize(
    ("slow", "throttled", "cause"),
    [
        (2, (), "slow_stage"),
        (2, (2,), "throttled_stage"),
        (0, (), "heavy_first_stage"),
        (3, (), "heavy_last_stage"),
    ],
)
def test_a_slow_stage_is_named_with_what_makes_it_slow(
    slow: int, throttled: tuple[int, ...], cause: str
) -> None:
    occ = np.full(4, 0.4)
    occ[slow] = 0.6
    j = judge(ONE_F_ONE_B_M4, occ, kernel_busy=np.ones(4), throttled_stages=throttled)
    assert not j.as_good
    assert (j.cause, j.cause_stage) == (cause, slow)
    assert j.imbalance_ratio > 0.05
    assert f"stage {slow}" in describe(j)


def test_the_first_stage_waiting_on_its_loader_is_a_data_loader_stall() -> None:
    occ = np.full(4, 0.45)
    kb = np.array([0.85, 1.0, 1.0, 0.99])  # stage 0 runs no kernel 15% of the time
    j = judge(ONE_F_ONE_B_M4, occ, kernel_busy=kb)
    assert (j.cause, j.cause_stage) == ("data_loader_stall", 0)
    assert j.host_wait_ratio == pytest.approx(0.15)
    assert "data loader" in describe(j)


def test_every_rank_without_kernels_is_a_host_wait() -> None:
    j = judge(ONE_F_ONE_B_M4, np.full(4, 0.45), kernel_busy=np.array([0.88, 0.87, 0.88, 0.86]))
    assert j.cause == "host_wait"


def test_kernels_held_without_work_beyond_the_schedule_is_communication() -> None:
    j = judge(ONE_F_ONE_B_M4, np.full(4, 0.45), kernel_busy=np.ones(4))
    assert (j.cause, j.cause_stage) == ("communication_wait", None)
    assert j.communication_ratio == pytest.approx(0.55 - 3 / 7)
    # no utilization.gpu at all: the rest is still what stages do not compute
    assert judge(ONE_F_ONE_B_M4, np.full(4, 0.45), kernel_busy=None).cause == "communication_wait"


def test_a_whole_pipeline_schedule_judges_the_stages_one_host_sees() -> None:
    """Two of four stages on this host: the formula takes the pipeline's p, not 2."""
    sched = PipelineSchedule("1f1b", 4, pp_size=4)
    j = judge(sched, np.full(2, 1 - 3 / 7), kernel_busy=np.ones(2))
    assert j.expected_bubble_ratio == pytest.approx(3 / 7) and j.as_good


def test_interleaved_and_zero_bubble_expectations() -> None:
    inter = judge(PipelineSchedule("interleaved", 4, 2), np.full(4, 0.7), kernel_busy=None)
    assert inter.expected_bubble_ratio == pytest.approx(3 / 11)
    zb = judge(PipelineSchedule("zero-bubble", 8), np.full(4, 0.97), kernel_busy=None)
    assert zb.expected_bubble_ratio == 0.0 and zb.as_good
