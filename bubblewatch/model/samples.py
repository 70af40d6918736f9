"""Row records: one GPU's reading at one instant, engine load, and events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from bubblewatch.model.metrics import Metric

# Where a row came from: a poll of the GPU, or the driver's sample buffer
# (nvmlDeviceGetSamples), which adds rows between polls at the driver's own rate.
SampleOrigin = Literal["poll", "buffer"]


class Sample(NamedTuple):
    """One GPU's readings at `t_s` (seconds since the Unix epoch).

    `values` holds only the metrics the GPU reported: absent means unsupported
    or unavailable at that instant, never zero. `origin` is "buffer" for rows
    read from the driver's sample buffers, which come at the driver's rate
    rather than one per poll.
    """

    t_s: float
    gpu: int
    values: Mapping[Metric, float]
    origin: SampleOrigin = "poll"


class LoadSample(NamedTuple):
    """The serving engine's load at `t_s`: running and queued requests (None if unknown).

    `micro_batch` is set where the engine reports the size of one micro-batch rather
    than all running requests (SGLang with pipeline parallelism): `running` is then
    that size too, a lower bound, exact only when every request shares one micro-batch.
    """

    t_s: float
    running: float | None
    queued: float | None
    micro_batch: float | None = None


@dataclass(frozen=True)
class Event:
    """Something that happened at an instant: an Xid error, a GPU lost, a topology change."""

    t_s: float
    kind: str
    gpu: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
