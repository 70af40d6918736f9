"""The bubble a training pipeline's schedule allows, to judge a measured pipeline against it.

GPipe and 1F1B with m micro-batches over p stages of equal time leave each
stage idle (p - 1) / (m + p - 1) of a step (fill and drain), whatever the
order of forwards and backwards. A measured pipeline whose useful share of
stage-time reaches 1 minus that is as good as its schedule allows; the fix
for the rest is more micro-batches (or another schedule), not configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class PipelineSchedule:
    """A training pipeline's schedule and its micro-batches per step."""

    kind: str
    micro_batches: int

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.kind!r} (known: {', '.join(SCHEDULES)})")
        if self.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {self.micro_batches}")

    def bubble_ratio(self, pp_size: int) -> float:
        """(p - 1) / (m + p - 1): the share of stage-time the schedule leaves idle."""
        p = max(pp_size, 1)
        return (p - 1) / (self.micro_batches + p - 1)

    def max_in_flight(self, pp_size: int) -> int:
        """Micro-batches that can be in flight at once: min(m, p)."""
        return min(self.micro_batches, max(pp_size, 1))
