"""The sampling interval in force: the configured one, or a faster default on training hosts.

Training steps last 100 ms to seconds, and the schedule judge
(bubblewatch.detect.steps) looks for step periods of at least 2.5 sampling
intervals: at the 1 s default it finds none shorter than 2.5 s. So when
discovery finds a training pipeline (a launch whose layout has pp > 1) and
`sampling.interval` is not set, the daemon samples every TRAINING_INTERVAL_S
instead, and goes back to the default when the job is gone. A configured
interval always wins.

Why 125 ms and not 100 ms: GPM samples (SM activity) must be more than
100 ms apart (docs/nvml.md; the sampler keeps a 5% margin), so at
100 ms ticks every other tick carries no SM activity (200 ms in effect); at
125 ms every tick does, with 20 ms to spare for scheduling jitter. What it
finds and costs (BENCHMARKS.md): on simulated 1F1B p=4, m=4 (0.45 s steps)
the step period is found at 0.1 and 0.125 s and lost at 0.2 s and slower;
the sampler costs ~46 µs CPU per GPU-sample, so 8 GPUs at 8 Hz take about
3 ms of CPU a second.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bubblewatch.daemon.config.file import DaemonConfig, SamplingConfig
from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.daemon.ring import RingBuffer, buffer_capacity_for, capacity_for
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.limits import HISTORY_MAX_SAMPLES

log = logging.getLogger("bubblewatch.daemon")

TRAINING_INTERVAL_S = 0.125


@dataclass(frozen=True)
class SamplingChoice:
    """The interval in force and why: `configured`, `default` or `training`."""

    interval_s: float
    reason: str
    pipeline: str = ""  # the training pipeline that asked for the faster default


def choose_interval(cfg: SamplingConfig, pipelines: Sequence[Pipeline]) -> SamplingChoice:
    """The configured interval if set; the training default while a training pipeline runs."""
    if cfg.interval_set:
        return SamplingChoice(cfg.interval_s, "configured")
    training = [p.id for p in pipelines if _training_pipeline(p)]
    # Never more samples per GPU than the history may hold (bubblewatch.limits).
    fast = max(TRAINING_INTERVAL_S, cfg.history_s / HISTORY_MAX_SAMPLES)
    if not training or fast >= cfg.interval_s:
        return SamplingChoice(cfg.interval_s, "default")
    return SamplingChoice(fast, "training", training[0])


def _training_pipeline(p: Pipeline) -> bool:
    layout = p.engine.training if p.engine is not None else None
    return layout is not None and layout.is_pipeline


def apply_sampling(
    current: SamplingChoice | None,
    cfg: DaemonConfig,
    pipelines: Sequence[Pipeline],
    source: DaemonSource,
    ring: RingBuffer,
) -> SamplingChoice:
    """Put the interval `cfg` and the pipelines call for in force, logged when it changes,
    with the ring sized to hold `sampling.history` at it; returns the choice."""
    choice = choose_interval(cfg.sampling, pipelines)
    if choice != current:
        source.set_interval(choice.interval_s)
        kv: dict[str, object] = {"interval": f"{choice.interval_s:g}s", "reason": choice.reason}
        if choice.pipeline:
            kv["pipeline"] = choice.pipeline
        log.info("sampling interval", extra={"kv": kv})
    capacity = capacity_for(cfg.sampling.history_s, choice.interval_s)
    buffered = buffer_capacity_for(cfg.analysis.window_s)
    if (capacity, buffered) != (ring.capacity, ring.buffer_capacity):
        ring.resize(capacity, buffered)
    return choice
