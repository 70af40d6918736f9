"""The schedule's expected bubble: formulas, framework names, and the inverse."""

from __future__ import annotations

import pytest

from bubblewatch.model.schedule import (
    ScheduleKind,
    bubble_ratio,
    expectation,
    resolve_schedule,
)


def test_fill_drain_formula_matches_the_issue_figures() -> None:
    # 1F1B, p=4: m=4 gives 3/7, m=16 gives 3/19.
    assert bubble_ratio(ScheduleKind.FILL_DRAIN, 4, 4) == pytest.approx(3 / 7)
    assert round(bubble_ratio(ScheduleKind.FILL_DRAIN, 4, 4), 2) == 0.43
    assert round(bubble_ratio(ScheduleKind.FILL_DRAIN, 4, 16), 2) == 0.16


def test_interleaved_divides_the_fill_by_v() -> None:
    assert bubble_ratio(ScheduleKind.INTERLEAVED, 4, 4, 2) == pytest.approx(3 / 11)
    # v is ignored by non-interleaved kinds.
    assert bubble_ratio(ScheduleKind.FILL_DRAIN, 4, 4, 2) == pytest.approx(3 / 7)


def test_no_pipeline_and_zero_bubble_are_zero() -> None:
    assert bubble_ratio(ScheduleKind.FILL_DRAIN, 1, 1) == 0.0
    assert bubble_ratio(ScheduleKind.ZERO_BUBBLE, 8, 8, 2) == 0.0
    assert bubble_ratio(ScheduleKind.NONE, 4, 4) == 0.0


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        bubble_ratio(ScheduleKind.FILL_DRAIN, 4, 0)


@pytest.mark.parametrize(
    ("framework", "name", "pp", "v", "want"),
    [
        ("megatron", None, 4, 1, ("1F1B", ScheduleKind.FILL_DRAIN, 1)),
        ("megatron", None, 4, 3, ("interleaved-1F1B", ScheduleKind.INTERLEAVED, 3)),
        ("nemo", None, 2, 1, ("1F1B", ScheduleKind.FILL_DRAIN, 1)),
        ("deepspeed", None, 2, 1, ("TrainSchedule", ScheduleKind.FILL_DRAIN, 1)),
        ("torchtitan", None, 2, 1, ("1F1B", ScheduleKind.FILL_DRAIN, 1)),
        ("torchtitan", "gpipe", 2, 1, ("GPipe", ScheduleKind.FILL_DRAIN, 1)),
        ("torchtitan", "Interleaved1F1B", 4, 1, ("Interleaved1F1B", ScheduleKind.INTERLEAVED, 2)),
        ("torchtitan", "LoopedBFS", 4, 3, ("LoopedBFS", ScheduleKind.INTERLEAVED, 3)),
        ("torchtitan", "ZBVZeroBubble", 4, 1, ("ZBVZeroBubble", ScheduleKind.ZERO_BUBBLE, 2)),
        ("torchtitan", "InterleavedZeroBubble", 4, 1,
         ("InterleavedZeroBubble", ScheduleKind.ZERO_BUBBLE, 2)),
        ("torchtitan", "DualPipeV", 4, 1, ("DualPipeV", ScheduleKind.ZERO_BUBBLE, 2)),
        ("torch", None, 1, 1, ("none", ScheduleKind.NONE, 1)),
    ],
)  # fmt: skip
def test_framework_schedule_names(framework, name, pp, v, want) -> None:
    s = resolve_schedule(framework, name, pp, v)
    assert s is not None
    assert (s.name, s.kind, s.virtual_stages) == want


def test_unknown_torchtitan_schedule_is_none() -> None:
    assert resolve_schedule("torchtitan", "Bogus", 4) is None


def test_expectation_writes_the_formula() -> None:
    s = resolve_schedule("megatron", None, 4, 1)
    assert s is not None
    e = expectation(s, 4, 4)
    assert e.formula == "(p-1)/(m+p-1) = 3/(4+3) = 0.429"
    assert e.to_dict()["bubble_ratio"] == 0.4286
