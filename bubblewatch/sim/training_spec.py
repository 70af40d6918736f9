"""A training job as typed, validated records: parallel layout, schedule, stage times, stalls.

`bubblewatch/scenarios/*.yaml` files with a `job:` section are these records
(the serving engine's scenarios have `model:` and `workload:` instead);
docs/simulator.md explains each field. Levels are calibrated to the public
H100 recordings listed in benchmarks/real_data_manifest.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bubblewatch.sim.spec import (
    ActivitySpec,
    FaultSpec,
    GpuSpec,
    InterconnectSpec,
    ObservationSpec,
    SpinSpec,
)

SCHEDULES = ("none", "gpipe", "1f1b", "interleaved", "forward")
STALL_KINDS = ("checkpoint", "data_loader", "hang")


@dataclass(frozen=True)
class TrainingHardware:
    """The GPU model (power, clocks, driver timing) and, for the record, the interconnect.

    `gpu.idle_power_w` is the draw with no kernel running while the job holds
    its CUDA context (H100: ~120 W; ~70 W only without a context).
    `gpu_idle_reason`: whether the driver flags GpuIdle between kernels (a
    GPU holding a context stays in P0 and does not, on H100).
    """

    gpu: GpuSpec
    interconnect: InterconnectSpec | None = None
    gpu_idle_reason: bool = False


@dataclass(frozen=True)
class StallSpec:
    """Host-side work that holds the job: the holding GPUs run nothing, the others spin.

    checkpoint / data_loader: every `every_steps` steps (0: once, at `start_s`)
    for `duration_s`. hang: from `start_s` on, for good.
    """

    kind: str
    duration_s: float = 0.0
    every_steps: int = 0
    start_s: float = 0.0
    holding_gpus: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class TrainingJobSpec:
    """One training job: layout, schedule, per-micro-batch stage times and what the GPUs show.

    schedule "none" is data or tensor parallel (every GPU computes in phase);
    "gpipe", "1f1b" and "interleaved" (1F1B with virtual_stages model chunks
    per rank, Megatron's order) are pipelines of pp_size stages with
    micro_batches per step; "forward" is inference split layer-wise over the
    pp_size GPUs of one process (Transformers/Accelerate `device_map`,
    llama.cpp's layer split): each step is one token's forward through the
    stages in turn, no backward, host_gap_s the host time between tokens.
    stage_forward_s has one entry per stage (or one for all); a backward
    takes backward_factor times its forward. Per step, after the pipeline:
    allreduce_s (data-parallel gradients, all GPUs in communication),
    optimizer_s (all GPUs compute), host_gap_s (the ranks that load data run
    no kernel; pipeline stages after the first spin waiting for them).
    kernel_gap_ratio: the share of each compute interval with no kernel
    (host- or launch-bound work). idle: a model is loaded and nothing runs.
    loading_s: the first seconds load the model (no kernel on any GPU) before
    the first step.
    """

    schedule: str = "none"
    pp_size: int = 1
    tp_size: int = 1
    dp_size: int = 1
    micro_batches: int = 1
    virtual_stages: int = 1
    stage_forward_s: tuple[float, ...] = (0.05,)
    backward_factor: float = 2.0
    send_s: float = 0.002
    allreduce_s: float = 0.0
    optimizer_s: float = 0.0
    host_gap_s: float = 0.0
    kernel_gap_ratio: float = 0.0
    step_jitter_ratio: float = 0.03
    compute_sm_active_ratio: float = 0.88
    compute_sm_occupancy_ratio: float = 0.5
    compute_tensor_active_ratio: float = 0.6
    comm_sm_active_ratio: float = 0.05
    idle: bool = False
    loading_s: float = 0.0
    stalls: tuple[StallSpec, ...] = ()

    @property
    def n_gpus(self) -> int:
        return self.pp_size * self.tp_size * self.dp_size

    def forward_s(self, stage: int) -> float:
        times = self.stage_forward_s
        return times[stage] if len(times) > 1 else times[0]


@dataclass(frozen=True)
class TrainingScenario:
    """A complete, validated training-job simulation input. Build with `load_scenario`."""

    name: str
    description: str
    launcher: str
    argv: tuple[str, ...]
    hardware: TrainingHardware
    job: TrainingJobSpec
    spin: SpinSpec = field(default_factory=SpinSpec)
    activity: ActivitySpec = field(default_factory=ActivitySpec)
    faults: tuple[FaultSpec, ...] = ()
    observation: ObservationSpec = field(default_factory=ObservationSpec)
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def engine(self) -> str:
        """What launched the job (torchrun, ...): serving scenarios name their engine here."""
        return self.launcher

    @property
    def engine_argv(self) -> tuple[str, ...]:
        return self.argv
