"""What the verdict rules know: window statistics, levels, load, pipeline evidence, job findings.

Shared by the rules of classify.py (the order and the non-pipeline verdicts) and
pipeline_findings.py (the pipeline signatures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bubblewatch.detect.infer import InferredTopology
from bubblewatch.detect.levels import Levels
from bubblewatch.detect.schedule_judge import Judgement
from bubblewatch.detect.stats import WindowStats
from bubblewatch.detect.steps import Steps
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import EvidenceValue, Finding, LoadContext
from bubblewatch.model.schedule import PipelineSchedule


@dataclass(frozen=True)
class Context:
    """What the rules know besides the window statistics."""

    stats: WindowStats
    levels: Levels
    load: LoadContext
    options: DetectOptions
    topology_given: bool
    topology_confidence: float  # 1 when given, inference confidence otherwise
    pipeline: bool = True  # pipeline evidence: a topology of 2+ stages, or a significant stagger
    inferred: InferredTopology | None = None
    collective_wait: Finding | None = None
    underfed: Finding | None = None
    schedule: PipelineSchedule | None = None
    # Concurrency from power against the card's known limit, where the SM level is only
    # assumed: the serialized rule falls back on it when SM activity cannot decide.
    power_concurrency: float | None = None
    # A training pipeline with a known schedule: its steps and the bubble against the schedule.
    steps: Steps | None = None
    judgement: Judgement | None = None
    # GPU -> median device memory in use over the window (bytes), where it was recorded.
    memory_used_b: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class InFlight:
    """Micro-batches in flight: estimate, one standard deviation, and the working level used."""

    estimate: float
    sigma: float
    working_level: float


def in_flight(c: Context) -> InFlight:
    """Concurrency over the stages' working level, with time and level uncertainty."""
    s = c.stats
    wl = s.working_level
    level = float(np.mean(wl)) if wl is not None and wl.size else 1.0
    sigma_conc = float(
        np.hypot(s.concurrency_sigma_time, s.concurrency * c.levels.uncertainty_ratio)
    )
    estimate = s.concurrency / level
    turns = c.inferred.turns if c.inferred is not None and c.inferred.is_pipeline else None
    if turns is not None and turns.busy_sum is not None:
        # GPUs taking turns: the shares of time their kernels run (utilization.gpu) add up to
        # the micro-batches in flight at most, whatever level the occupancy was scaled by.
        return InFlight(min(estimate, turns.busy_sum), turns.busy_sum_sigma, level)
    return InFlight(estimate, sigma_conc / level, level)


def score(x: float, zero_at: float, one_at: float) -> float:
    """Linear ramp from 0 (at zero_at) to 1 (at one_at), clipped; works either direction."""
    if one_at == zero_at:
        return 1.0 if x >= one_at else 0.0
    return float(np.clip((x - zero_at) / (one_at - zero_at), 0.0, 1.0))


def as_number(x: EvidenceValue) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0.0


def rounded(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def running_requests(load: LoadContext, micro_batches: float | None) -> float | None:
    """Running requests: the gauge, or where it counts one micro-batch, at least its size
    times the micro-batches in flight (`micro_batches`, None without a pipeline to count)."""
    if load.micro_batch is None or micro_batches is None or not np.isfinite(micro_batches):
        return load.running
    estimate = load.micro_batch * max(micro_batches, 1.0)
    return estimate if load.running is None else max(load.running, estimate)


def running_source(load: LoadContext, micro_batches: float | None) -> str | None:
    """Where running_requests comes from (EVIDENCE_KEYS: running_requests_source)."""
    if load.micro_batch is None:
        return None if load.running is None else "gauge"
    if micro_batches is None or not np.isfinite(micro_batches):
        return "micro_batch_lower_bound"
    return "micro_batch_estimate"


def load_limited(load: LoadContext, micro_batches: float, options: DetectOptions) -> bool | None:
    """Too few requests to fill a serialized pipeline (None: load unknown).

    A per-micro-batch gauge counts only the requests of one micro-batch: the
    pipeline is called load-limited on the estimate of all of them, never on
    that lower bound alone.
    """
    running = running_requests(load, micro_batches)
    return None if running is None else running <= options.load_limited_running


def load_active(load: LoadContext, options: DetectOptions) -> bool | None:
    if not load.known:
        return None
    return (load.running or 0.0) + (load.queued or 0.0) >= options.idle_load
