"""What a simulation returns: the timeline, throughput and the ground truth per stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.sim.spec import Scenario
from bubblewatch.sim.timeline import Timeline
from bubblewatch.sim.training_spec import TrainingScenario
from bubblewatch.sim.truth_series import TruthSeries

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StageTruth:
    """What one stage really did over the run (the detector's answer key)."""

    replica: int
    stage: int
    gpus: tuple[int, ...]
    layers: int
    busy_ratio: float  # share of time computing (useful work)
    spin_ratio: float  # share of time in NCCL receive spin
    kernel_busy_ratio: float
    sm_active_ratio: float
    power_w: float
    micro_batches: int
    mean_stage_time_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "stage": self.stage,
            "gpus": list(self.gpus),
            "layers": self.layers,
            "busy_ratio": round(self.busy_ratio, 4),
            "spin_ratio": round(self.spin_ratio, 4),
            "kernel_busy_ratio": round(self.kernel_busy_ratio, 4),
            "sm_active_ratio": round(self.sm_active_ratio, 4),
            "power_w": round(self.power_w, 2),
            "micro_batches": self.micro_batches,
            "mean_stage_time_s": round(self.mean_stage_time_s, 6),
        }


@dataclass(frozen=True)
class ReplicaTruth:
    """One pipeline's scheduling figures."""

    replica: int
    tokens: int
    tokens_per_s: float
    mean_in_flight: float  # time-weighted micro-batches in flight
    max_in_flight: int
    micro_batch_cap: int
    decode_tokens_per_micro_batch: float
    mean_running: float
    mean_queued: float
    busy_sum: float  # sum over stages of busy_ratio (<= ~1 when serialized)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "tokens": self.tokens,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "mean_in_flight": round(self.mean_in_flight, 4),
            "max_in_flight": self.max_in_flight,
            "micro_batch_cap": self.micro_batch_cap,
            "decode_tokens_per_micro_batch": round(self.decode_tokens_per_micro_batch, 3),
            "mean_running": round(self.mean_running, 3),
            "mean_queued": round(self.mean_queued, 3),
            "busy_sum": round(self.busy_sum, 4),
        }


@dataclass(frozen=True)
class Truth:
    """Ground truth of a run: per stage and per replica."""

    stages: tuple[StageTruth, ...]
    replicas: tuple[ReplicaTruth, ...]

    def stage(self, stage: int, replica: int = 0) -> StageTruth:
        return next(s for s in self.stages if s.stage == stage and s.replica == replica)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [s.to_dict() for s in self.stages],
            "replicas": [r.to_dict() for r in self.replicas],
        }


@dataclass(frozen=True)
class LoadHistory:
    """Engine load as step functions (value holds from t until the next t), summed over replicas.

    `running` is the true count; `micro_batch` what the engine's gauge shows where
    it counts one micro-batch (SGLang with PP), NaN where it counts all; None: never.
    """

    t_s: FloatArray
    running: FloatArray
    queued: FloatArray
    micro_batch: FloatArray | None = None


@dataclass(frozen=True)
class SimResult:
    """A finished simulation."""

    scenario: Scenario | TrainingScenario
    duration_s: float
    seed: int
    timeline: Timeline
    tokens_per_s: float
    truth: Truth
    gpus: tuple[GpuInfo, ...]
    topologies: tuple[Topology, ...]
    load: LoadHistory
    truth_series: TruthSeries | None = None  # per second (truth_series.py)

    @property
    def topology(self) -> Topology | None:
        """The pipeline's topology; None for several data-parallel replicas (see `topologies`)."""
        return self.topologies[0] if len(self.topologies) == 1 else None
