"""What a pipeline schedule allows: the bubble a training step cannot avoid.

Pure functions of the layout (p stages, m micro-batches per step, v virtual
stages per rank). The bubble is the share of a step's stage-time spent idle
in the schedule's fill and drain, with equal stage times and free
communication:

- GPipe and 1F1B (PipeDream-Flush; Megatron without virtual stages;
  DeepSpeed's `TrainSchedule`): (p-1) / (m+p-1). 1F1B only saves memory.
- Interleaved 1F1B (Megatron virtual stages; torchtitan `Interleaved1F1B`;
  `LoopedBFS`, which has the same fill and drain): (p-1) / (v*m+p-1).
- Zero-bubble schedules (torchtitan `InterleavedZeroBubble`,
  `ZBVZeroBubble`, `DualPipeV`): near 0, taken as 0. They fill warm-up and
  cool-down with weight-gradient passes; what remains depends on how those
  split, which no layout says.

Schedule names are the frameworks' own: torchtitan passes
`pipeline_parallel_schedule` to `torch.distributed.pipelining`'s
`get_schedule_class` (case-insensitive: GPipe, 1F1B, Interleaved1F1B,
LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV); Megatron picks
`forward_backward_pipelining_with_interleaving` when a virtual pipeline size
is set, else `..._without_interleaving` (`megatron/core/pipeline_parallel/
schedules.py`, `get_forward_backward_func`); DeepSpeed's `PipelineEngine`
runs `TrainSchedule` with m = gradient_accumulation_steps
(`deepspeed/runtime/pipe/engine.py`, 0.16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "SCHEDULES",
    "Expectation",
    "PipelineSchedule",
    "Schedule",
    "ScheduleKind",
    "bubble_ratio",
    "expectation",
    "resolve_schedule",
]


class ScheduleKind(str, Enum):
    NONE = "none"  # no pipeline: nothing to fill
    FILL_DRAIN = "fill_drain"  # GPipe, 1F1B
    INTERLEAVED = "interleaved"  # several model chunks per rank
    ZERO_BUBBLE = "zero_bubble"


# torch.distributed.pipelining schedule names (lower case) -> kind, stages per rank.
_TORCH_SCHEDULES: dict[str, tuple[str, ScheduleKind, int | None]] = {
    "gpipe": ("GPipe", ScheduleKind.FILL_DRAIN, 1),
    "1f1b": ("1F1B", ScheduleKind.FILL_DRAIN, 1),
    "interleaved1f1b": ("Interleaved1F1B", ScheduleKind.INTERLEAVED, None),
    "loopedbfs": ("LoopedBFS", ScheduleKind.INTERLEAVED, None),
    "interleavedzerobubble": ("InterleavedZeroBubble", ScheduleKind.ZERO_BUBBLE, None),
    "zbvzerobubble": ("ZBVZeroBubble", ScheduleKind.ZERO_BUBBLE, 2),
    "dualpipev": ("DualPipeV", ScheduleKind.ZERO_BUBBLE, 2),
}
# Multi-stage torchtitan schedules default to 2 stages per rank
# (torchtitan/distributed/pipeline_parallel.py, `pipeline_llm`, 0.2.x).
TORCHTITAN_DEFAULT_STAGES_PER_RANK = 2


@dataclass(frozen=True)
class Schedule:
    """A schedule as the framework names it, its kind, and model chunks per rank."""

    name: str
    kind: ScheduleKind
    virtual_stages: int = 1


def resolve_schedule(
    framework: str, name: str | None, pp: int, virtual_stages: int = 1
) -> Schedule | None:
    """The schedule a framework runs with these settings; None if the name is unknown."""
    if pp <= 1:
        return Schedule("none", ScheduleKind.NONE, 1)
    if framework in ("megatron", "nemo"):
        if virtual_stages > 1:
            return Schedule("interleaved-1F1B", ScheduleKind.INTERLEAVED, virtual_stages)
        return Schedule("1F1B", ScheduleKind.FILL_DRAIN, 1)
    if framework == "deepspeed":
        return Schedule("TrainSchedule", ScheduleKind.FILL_DRAIN, 1)
    if framework == "torchtitan":
        hit = _TORCH_SCHEDULES.get((name or "1F1B").lower())
        if hit is None:
            return None
        canonical, kind, v = hit
        if v is None:
            v = virtual_stages if virtual_stages > 1 else TORCHTITAN_DEFAULT_STAGES_PER_RANK
        return Schedule(canonical, kind, v)
    return Schedule(name or "unknown", ScheduleKind.FILL_DRAIN, max(virtual_stages, 1))


def bubble_ratio(kind: ScheduleKind, pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """Share of stage-time idle per step under the schedule (equal stage times)."""
    if pp < 1 or micro_batches < 1 or virtual_stages < 1:
        raise ValueError(
            f"pp, micro_batches and virtual_stages must be >= 1, got {pp}, {micro_batches}, "
            f"{virtual_stages}"
        )
    if kind is ScheduleKind.NONE or pp == 1 or kind is ScheduleKind.ZERO_BUBBLE:
        return 0.0
    v = virtual_stages if kind is ScheduleKind.INTERLEAVED else 1
    return (pp - 1) / (v * micro_batches + pp - 1)


@dataclass(frozen=True)
class Expectation:
    """What the schedule allows for one layout, and the formula that says so."""

    schedule: Schedule
    pp: int
    micro_batches: int
    bubble_ratio: float
    formula: str

    def to_dict(self) -> dict[str, object]:
        return {
            "schedule": self.schedule.name,
            "kind": self.schedule.kind.value,
            "virtual_stages": self.schedule.virtual_stages,
            "pp_size": self.pp,
            "micro_batches": self.micro_batches,
            "bubble_ratio": round(self.bubble_ratio, 4),
            "formula": self.formula,
        }


def expectation(schedule: Schedule, pp: int, micro_batches: int) -> Expectation:
    """The expected bubble with the formula written out for a report."""
    ratio = bubble_ratio(schedule.kind, pp, micro_batches, schedule.virtual_stages)
    p, m, v = pp, micro_batches, schedule.virtual_stages
    if schedule.kind is ScheduleKind.NONE or p == 1:
        text = "no pipeline: no fill or drain"
    elif schedule.kind is ScheduleKind.ZERO_BUBBLE:
        text = f"{schedule.name}: zero-bubble schedule, taken as 0"
    elif schedule.kind is ScheduleKind.INTERLEAVED:
        text = f"(p-1)/(v*m+p-1) = {p - 1}/({v}*{m}+{p - 1}) = {ratio:.3f}"
    else:
        text = f"(p-1)/(m+p-1) = {p - 1}/({m}+{p - 1}) = {ratio:.3f}"
    return Expectation(schedule, pp, micro_batches, ratio, text)


# The schedules `analyze --schedule` names for a measured pipeline.
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero-bubble")
_KINDS = {
    "gpipe": ScheduleKind.FILL_DRAIN,
    "1f1b": ScheduleKind.FILL_DRAIN,
    "interleaved": ScheduleKind.INTERLEAVED,
    "zero-bubble": ScheduleKind.ZERO_BUBBLE,
}
_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B"}


@dataclass(frozen=True)
class PipelineSchedule:
    """A training pipeline's schedule and its micro-batches per step.

    Given on the command line (`analyze --schedule --micro-batches
    --virtual-stages`) or from a discovered layout (`from_expectation`). A
    measured pipeline whose useful share of stage-time reaches 1 minus the
    schedule's bubble is as good as its schedule allows; the fix for the rest
    is more micro-batches (or another schedule), not configuration.
    """

    kind: str
    micro_batches: int
    virtual_stages: int = 1
    name: str = ""  # the framework's own name (1F1B, Interleaved1F1B, TrainSchedule, ...)
    # Stages of the whole pipeline when known (a layout); None: the stages analysed. A host
    # of a pipeline that spans hosts sees only some of its stages.
    pp_size: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.kind!r} (known: {', '.join(SCHEDULES)})")
        if self.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {self.micro_batches}")
        if self.kind == "interleaved" and self.virtual_stages < 2:
            raise ValueError(
                f"an interleaved schedule needs 2 or more virtual stages, got {self.virtual_stages}"
            )
        if self.pp_size is not None and self.pp_size < 1:
            raise ValueError(f"pp_size must be >= 1, got {self.pp_size}")
        if self.kind in ("gpipe", "1f1b") and self.virtual_stages != 1:
            raise ValueError(
                f"{self.kind} runs one model chunk per rank: virtual stages must be 1, got "
                f"{self.virtual_stages} (give --schedule interleaved)"
            )

    @property
    def label(self) -> str:
        """How reports name it: the framework's name, else ours."""
        return self.name or _NAMES.get(self.kind, self.kind)

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.label, _KINDS[self.kind], self.virtual_stages)

    @property
    def effective_micro_batches(self) -> float:
        """Model-chunk passes per rank and step, v*m (infinite for a zero-bubble schedule)."""
        if self.kind == "zero-bubble":
            return math.inf
        return float(self.virtual_stages * self.micro_batches)

    def stages(self, analysed: int) -> int:
        """p: the pipeline's own stage count when known, else the stages analysed."""
        return self.pp_size if self.pp_size is not None else max(analysed, 1)

    def bubble_ratio(self, pp_size: int) -> float:
        """The share of stage-time the schedule leaves idle (p: `stages(pp_size)`)."""
        p = self.stages(pp_size)
        return bubble_ratio(_KINDS[self.kind], p, self.micro_batches, self.virtual_stages)

    def expectation(self, pp_size: int) -> Expectation:
        """The expected bubble with its formula written out (p: `stages(pp_size)`)."""
        return expectation(self.schedule, self.stages(pp_size), self.micro_batches)

    def max_in_flight(self, pp_size: int) -> int:
        """Micro-batches that can be in flight at once: min(m, p)."""
        return min(self.micro_batches, self.stages(pp_size))

    @classmethod
    def from_expectation(cls, e: Expectation) -> PipelineSchedule | None:
        """The schedule a discovered layout runs; None for no pipeline."""
        kind = {
            ScheduleKind.FILL_DRAIN: "1f1b",
            ScheduleKind.INTERLEAVED: "interleaved",
            ScheduleKind.ZERO_BUBBLE: "zero-bubble",
        }.get(e.schedule.kind)
        if kind is None or e.pp < 2:
            return None
        v = e.schedule.virtual_stages if kind == "interleaved" else 1
        if kind == "interleaved" and v < 2:
            return None
        return cls(kind, e.micro_batches, v, e.schedule.name, e.pp)

    @classmethod
    def from_header(cls, raw: Mapping[str, Any]) -> PipelineSchedule:
        """From a trace header's `meta.schedule`; ValueError names the bad field."""
        kind = raw.get("kind")
        if not isinstance(kind, str):
            raise ValueError(f"schedule.kind must be one of {', '.join(SCHEDULES)}, got {kind!r}")
        counts: dict[str, int | None] = {}
        for key, default in (("micro_batches", None), ("virtual_stages", 1), ("pp_size", None)):
            v = raw.get(key, default)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ValueError(f"schedule.{key} must be a whole number, got {v!r}")
            counts[key] = v
        m = counts["micro_batches"]
        if m is None:
            raise ValueError("schedule.micro_batches is missing")
        v = counts["virtual_stages"]
        return cls(kind, m, 1 if v is None else v, pp_size=counts["pp_size"])
