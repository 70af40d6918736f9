"""The detector's vocabulary: verdicts, findings with evidence, and the Diagnosis.

Verdict names are a stable interface: JSON output, Prometheus labels and rule
expressions use them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

EvidenceValue = float | int | str | bool | None | list[Any] | dict[str, Any]


class Verdict(str, Enum):
    """What the pipeline is doing, as one word."""

    SERIALIZED = "serialized"
    HEALTHY = "healthy"
    LAUNCH_BOUND = "launch_bound"
    IMBALANCED = "imbalanced"
    STRAGGLER = "straggler"
    IDLE = "idle"
    NOT_PIPELINE = "not_pipeline"
    INSUFFICIENT_DATA = "insufficient_data"
    # Findings about the job, with or without a pipeline.
    COLLECTIVE_WAIT = "collective_wait"
    UNDERFED = "underfed"
    # A training pipeline whose measured bubble exceeds what its schedule allows.
    BELOW_SCHEDULE = "below_schedule"


# Verdicts that say something about a pipeline: said only on pipeline evidence.
PIPELINE_VERDICTS = frozenset(
    {
        Verdict.SERIALIZED,
        Verdict.HEALTHY,
        Verdict.IMBALANCED,
        Verdict.LAUNCH_BOUND,
        Verdict.BELOW_SCHEDULE,
    }
)


@dataclass(frozen=True)
class LoadContext:
    """Engine load over the window, when known (from engine metrics or a trace).

    `micro_batch` is the mean size of one micro-batch where the engine's gauge
    counts one rather than all running requests (SGLang with pipeline
    parallelism): `running` is then only a lower bound (see
    context.running_requests).
    """

    running: float | None = None
    queued: float | None = None
    micro_batch: float | None = None

    @property
    def known(self) -> bool:
        return self.running is not None or self.queued is not None


@dataclass(frozen=True)
class Finding:
    """One verdict with its confidence (0..1), the numbers that decided it, and a sentence."""

    verdict: Verdict
    confidence: float
    summary: str
    evidence: Mapping[str, EvidenceValue] = field(default_factory=dict)
    stage: int | None = None
    gpu: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "verdict": self.verdict.value,
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "evidence": dict(self.evidence),
        }
        if self.stage is not None:
            d["stage"] = self.stage
        if self.gpu is not None:
            d["gpu"] = self.gpu
        return d


@dataclass(frozen=True)
class StageStats:
    """Per-stage figures over the window (NaN or None where not measurable)."""

    stage: int
    gpus: tuple[int, ...]
    occupancy_ratio: float
    sm_active_ratio: float | None
    kernel_busy_ratio: float | None
    power_w: float | None
    idle_power_w: float | None
    spin_ratio: float | None
    lag_s: float | None
    bubble_energy_j: float | None
    extra: Mapping[str, EvidenceValue] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "stage": self.stage,
            "gpus": list(self.gpus),
            "occupancy_ratio": _r(self.occupancy_ratio),
            "sm_active_ratio": _r(self.sm_active_ratio),
            "kernel_busy_ratio": _r(self.kernel_busy_ratio),
            "power_w": _r(self.power_w),
            "idle_power_w": _r(self.idle_power_w),
            "spin_ratio": _r(self.spin_ratio),
            "lag_s": _r(self.lag_s, 4),
            "bubble_energy_j": _r(self.bubble_energy_j),
        }
        d.update(self.extra)
        return d


@dataclass(frozen=True)
class Diagnosis:
    """The detector's answer for one window.

    `verdict` is the primary finding; `findings` holds it first, then the
    secondary ones. `load_limited` is set for serialized pipelines: True when
    too little work exists to fill the pipeline (inherent), False when it runs
    serialized under load (a configuration problem), None when unknown.
    """

    verdict: Verdict
    confidence: float
    findings: tuple[Finding, ...]
    stages: tuple[StageStats, ...]
    window_s: float
    n_samples: int
    load_limited: bool | None = None
    evidence: Mapping[str, EvidenceValue] = field(default_factory=dict)

    def finding(self, verdict: Verdict) -> Finding | None:
        return next((f for f in self.findings if f.verdict is verdict), None)

    def has(self, verdict: Verdict) -> bool:
        return self.finding(verdict) is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "confidence": round(self.confidence, 3),
            "load_limited": self.load_limited,
            "window_s": round(self.window_s, 3),
            "n_samples": self.n_samples,
            "evidence": dict(self.evidence),
            "findings": [f.to_dict() for f in self.findings],
            "stages": [s.to_dict() for s in self.stages],
        }


# Keys of Diagnosis.evidence that every diagnosis carries (None when not measurable).
# The rules engine exposes them as facts, so they are a stable interface too.
EVIDENCE_KEYS: dict[str, str] = {
    "signal": "which signal measured occupancy: 'sm_active' or 'power'",
    "pp_size": "number of pipeline stages analysed",
    "tp_size": "GPUs per stage",
    "concurrency": "effective pipeline concurrency: sum of stage occupancies",
    "bubble_ratio": "1 - concurrency / pp_size: share of stage-time lost to bubbles",
    "mean_occupancy_ratio": "mean of stage occupancies",
    "lag_rank_correlation": "Spearman correlation of per-stage lag with stage order (-1..1)",
    "spin_ratio": "largest per-stage share of time in NCCL spin (kernel busy, SMs idle)",
    "launch_bound_index": "0..1: kernel-busy high while SM activity and power low when computing",
    "imbalance_ratio": "busiest stage's occupancy over the mean stage occupancy",
    "imbalanced_stage": "index of the busiest stage, or None",
    "straggler_gpu": "GPU index of a throttled or slow GPU, or None",
    "throttle_reasons": "names of throttle reasons seen on the straggler",
    "bubble_energy_j": "energy above idle spent while stages were not doing useful work",
    "topology_agreement": "if the lag order agrees with the given topology, None if none given",
    "running_requests": "mean running requests over the window, or None; where the engine's "
    "gauge counts one micro-batch (SGLang with PP), at least micro_batch_requests x "
    "micro_batches_in_flight (running_requests_source)",
    "running_requests_source": "'gauge' (the engine counts all running requests), "
    "'micro_batch_estimate' (its gauge counts one micro-batch: size x micro-batches in flight), "
    "'micro_batch_lower_bound' (one micro-batch, no pipeline to count them in), or None",
    "micro_batch_requests": "mean requests in one micro-batch, where the engine's gauge counts "
    "one (SGLang with PP: the micro-batch it last logged), or None",
    "queued_requests": "mean queued requests over the window, or None",
    "pipeline_evidence": "why the GPUs are (or are not) judged as a pipeline: 'topology' "
    "(given or discovered), 'stagger' (inferred, significant against a null model), "
    "'turn_taking' (GPUs whose busy periods do not overlap beyond chance: layer-split model "
    "parallelism) or 'none'",
    "stagger_p_value": "no topology: p-value of the stagger between GPU groups (or, with "
    "pipeline_evidence 'turn_taking', of the turn-taking) under the circular-shift null "
    "(small: a pipeline), or None",
    "concurrency_uncertainty": "one standard deviation of the concurrency estimate "
    "(time variation and level uncertainty)",
    "micro_batches_in_flight": "estimated micro-batches in flight: concurrency over a stage's "
    "working level",
    "micro_batches_allowed": "micro-batches a given training schedule lets be in flight, "
    "min(m, p), or None",
    "expected_bubble_ratio": "bubble the training schedule allows, (p-1)/(m+p-1) for GPipe/1F1B "
    "with m micro-batches, (p-1)/(v*m+p-1) interleaved, 0 zero-bubble, or None",
    "expected_formula": "the expected bubble's formula with the numbers, or None",
    "schedule_efficiency_ratio": "measured stage-time share doing work over what the schedule "
    "allows (1: as good as the schedule), or None",
    "measured_bubble_ratio": "training pipeline with a known schedule: 1 - mean stage "
    "occupancy, the share of stage-time not doing useful work (over whole steps: 1 - mean busy "
    "time per step / step period), or None",
    "schedule_excess_ratio": "measured minus expected bubble, or None",
    "schedule_judgement": "'as_good' (the excess within the tolerance), 'below' (the bubble "
    "exceeds what the schedule allows), or None without a schedule",
    "excess_cause": "what costs the bubble above the schedule's: slow_stage, throttled_stage, "
    "heavy_first_stage, heavy_last_stage, data_loader_stall, host_wait, communication_wait; "
    "or None",
    "excess_stage": "the stage the excess comes from (the slowest, or the one waiting on its "
    "host), or None",
    "imbalance_bubble_ratio": "the schedule's bubble with the measured stage busy times: "
    "1 - mean b / ((sum b + (v*m-1) max b) / (v*m)), or None",
    "step_period_s": "training step period found in the stages' occupancy, or None",
    "stage_busy_s": "per stage, seconds of useful work per step (occupancy x period), or None",
    "wave_order": "stages in the order the step's waves pass them (stage 0 first), or None",
    "wave_rank_correlation": "Spearman of the wave order vs the stage index (1: the waves "
    "follow the topology), None for fewer than 3 stages",
    "holding_gpus": "collective wait: GPUs that run nothing while the others wait on them",
    "waiting_gpus": "collective wait: GPUs spinning in a collective",
    "collective_wait_s": "collective wait still going at the end of the window (s), or None",
    "collective_wait_energy_j": "energy the waiting GPUs drew above idle while waiting",
}


def _r(v: float | None, nd: int = 3) -> float | None:
    if v is None or math.isnan(v):
        return None
    return round(float(v), nd)
