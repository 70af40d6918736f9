"""The scenario as typed, validated records: hardware, model, parallelism, workload, faults.

Every number carries its unit in its name. `bubblewatch/scenarios/*.yaml` are
these records written out; docs/simulator.md explains each field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bubblewatch import engines
from bubblewatch.engines.base import InFlight
from bubblewatch.engines.sglang.scheduler import default_cap
from bubblewatch.model.gpu_models import POWER_READING_INSTANT_S, power_average_s

# The engines the simulator plays: each has a scheduler loop here (sched_<engine>.py)
# driven by its policy in bubblewatch.engines.<engine>.
ENGINES = ("sglang", "vllm")
INTERCONNECTS = ("pcie", "nvlink")
FAULT_KINDS = ("power_cap", "thermal", "hw_slowdown")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: bandwidth, compute, power envelope, clocks, thermal and driver timing."""

    name: str
    memory_bandwidth_bytes_per_s: float
    memory_efficiency_ratio: float
    tensor_flops_per_s: float
    compute_efficiency_ratio: float
    power_limit_w: float
    idle_power_w: float
    spin_power_w: float
    peak_power_w: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float
    min_kernel_s: float = 2.5e-6
    utilization_period_s: float = 1.0 / 6.0
    instant_power_window_s: float = 0.025
    ambient_c: float = 30.0
    thermal_c_per_w: float = 0.1
    thermal_tau_s: float = 20.0

    @property
    def power_usage_window_s(self) -> float:
        """What nvmlDeviceGetPowerUsage (power_avg_w) averages over on this model: 1 s on
        Ampere (except GA100) and newer, an instant reading (`instant_power_window_s`) on GA100
        and older (bubblewatch.model.gpu_models); a name it does not know reads 1 s."""
        avg_s = power_average_s(self.name)
        return self.instant_power_window_s if avg_s == POWER_READING_INSTANT_S else avg_s


@dataclass(frozen=True)
class InterconnectSpec:
    """How GPUs talk: activations between stages and TP all-reduces."""

    kind: str
    bandwidth_bytes_per_s: float
    latency_s: float
    allreduce_latency_s: float


@dataclass(frozen=True)
class HostSpec:
    """CPU-side costs of the serving engine (per kernel, per forward, per PP hop, per step)."""

    launch_overhead_s: float
    batch_prep_s: float
    pp_hop_s: float
    step_overhead_s: float
    # One turn of the scheduler loop over a slot with nothing to run (receive, check).
    empty_iteration_s: float = 5.0e-5


@dataclass(frozen=True)
class HardwareSpec:
    gpu: GpuSpec
    interconnect: InterconnectSpec
    host: HostSpec


@dataclass(frozen=True)
class MoeSpec:
    """Mixture of experts: a batch touches more distinct experts as it grows."""

    experts: int
    experts_per_token: int
    expert_weight_bytes: float


@dataclass(frozen=True)
class ModelSpec:
    """What one layer costs: weights read per decode step, FLOPs per token, kernels launched."""

    name: str
    layers: int
    hidden_size: int
    dense_weight_bytes_per_layer: float
    flops_per_token_per_layer: float
    kv_bytes_per_token_per_layer: float
    kernels_per_layer: int
    activation_bytes: int = 2
    moe: MoeSpec | None = None


@dataclass(frozen=True)
class ParallelSpec:
    """Parallel layout and scheduler settings, as the engine flags set them."""

    pp_size: int
    tp_size: int = 1
    dp_size: int = 1
    pp_async_batch_depth: int = 0
    cuda_graph: bool = True
    layer_partition: tuple[int, ...] | None = None
    max_running_requests: int = 128
    pp_max_micro_batch_size: int | None = None
    # SGLang --prefill-max-requests (0.5.7+): at most this many requests in one prefill
    # batch (PrefillAdder.add_one_req); None: no limit.
    prefill_max_requests: int | None = None
    overlap_schedule: bool | None = None
    # vLLM's model runner (VLLM_USE_V2_MODEL_RUNNER): True V2, False V1, None the release's pick.
    v2_model_runner: bool | None = None
    # Expert parallelism over the TP group (SGLang --ep-size): each GPU holds whole experts.
    ep_size: int = 1

    def overlaps_cpu(self, engine: str) -> bool:
        """Whether the engine prepares the next batch while the GPU runs the current one.

        SGLang's overlap scheduler is on by default but cannot run with PP; vLLM needs
        `--async-scheduling`. `overlap_schedule` overrides the engine default.
        """
        if self.overlap_schedule is not None:
            return self.overlap_schedule
        return engines.require(engine).scheduler.overlaps_cpu(self.pp_size)

    @property
    def n_gpus(self) -> int:
        return self.pp_size * self.tp_size * self.dp_size

    @property
    def micro_batch_cap(self) -> int:
        """SGLang's default: max(max_running_requests // pp_size, 1) when unset."""
        if self.pp_max_micro_batch_size is not None:
            return self.pp_max_micro_batch_size
        return default_cap(self.max_running_requests, self.pp_size)

    def slots(self, engine: str) -> int:
        """Micro-batch slots the scheduler cycles over (docs/simulator.md).

        SGLang: `pp_loop_size = pp_size + pp_async_batch_depth`; vLLM: a queue of
        `max_concurrent_batches` (`vllm_in_flight`). How many are really in flight
        depends on how many slots hold requests, which the simulation decides.
        The numbers are the engine's scheduler policy (bubblewatch.engines).
        """
        n = engines.require(engine).scheduler.micro_batch_slots(
            self.pp_size, self.pp_async_batch_depth
        )
        return self.pp_size if n is None else n  # no slots: the stages

    def in_flight(
        self, engine: str, version: str | None, argv: tuple[str, ...] = ()
    ) -> InFlight | None:
        """The engine's batch queue for these settings; None where its slots decide.

        Async scheduling is `overlap_schedule` when set, else the last of the
        engine's (on, off) async flags in `argv`, else the release default.
        """
        known = engines.require(engine)
        flag = self.overlap_schedule
        pair = known.fixes.async_flags
        if flag is None and pair is not None:
            for arg in argv:
                if arg in pair:
                    flag = arg == pair[0]
        return known.scheduler.batches_in_flight(
            version, self.pp_size, async_flag=flag, v2_env=self.v2_model_runner
        )

    def vllm_in_flight(self, version: str | None, argv: tuple[str, ...] = ()) -> InFlight:
        """vLLM `version`'s batch queue for these settings (bubblewatch.engines.vllm.batches).

        Async scheduling is `overlap_schedule` when set, else the last of
        `--async-scheduling` / `--no-async-scheduling` in `argv`, else the release default.
        """
        flight = self.in_flight("vllm", version, argv)
        assert flight is not None
        return flight


def even_partition(layers: int, stages: int) -> tuple[int, ...]:
    """SGLang's default split: equal shares, the remainder on the last stages."""
    base, rem = divmod(layers, stages)
    return tuple(base + (1 if s >= stages - rem else 0) for s in range(stages))


@dataclass(frozen=True)
class LoadPhase:
    """From `start_s` on, the client keeps `concurrency` requests outstanding."""

    start_s: float
    concurrency: int


@dataclass(frozen=True)
class WorkloadSpec:
    """A closed-loop client: a finished request is replaced at once while below concurrency."""

    concurrency: int
    input_tokens: int
    output_tokens: int
    length_jitter_ratio: float = 0.0
    chunk_size: int = 8192  # prefill token budget of one batch (SGLang --chunked-prefill-size)
    schedule: tuple[LoadPhase, ...] = ()
    # A phase's first requests arrive together (0) or evenly spread over ramp_s.
    ramp_s: float = 0.0
    # From a request's last token processed to its replacement at the scheduler.
    client_delay_s: float = 0.005

    def phases(self) -> tuple[LoadPhase, ...]:
        """The schedule with the base concurrency from t=0 when it has no phase at 0."""
        if self.schedule and self.schedule[0].start_s <= 0.0:
            return self.schedule
        return (LoadPhase(0.0, self.concurrency), *self.schedule)


@dataclass(frozen=True)
class SpinSpec:
    """NCCL receive busy-wait: a rank waiting for input runs a spin kernel."""

    enabled: bool = True
    stage0: bool = True
    sm_active_ratio: float = 0.02
    sm_occupancy_ratio: float = 0.01


@dataclass(frozen=True)
class ActivitySpec:
    """SM, occupancy and tensor activity while kernels of each kind run."""

    decode_sm_active_ratio: float = 0.85
    decode_sm_occupancy_ratio: float = 0.35
    decode_tensor_active_ratio: float = 0.25
    prefill_sm_active_ratio: float = 0.97
    prefill_sm_occupancy_ratio: float = 0.6
    prefill_tensor_active_ratio: float = 0.7
    comm_sm_active_ratio: float = 0.05
    launch_gap_kernel_busy_ratio: float = 0.85
    launch_gap_sm_active_ratio: float = 0.04
    power_sm_weight: float = 0.6
    power_tensor_weight: float = 0.4


@dataclass(frozen=True)
class FaultSpec:
    """A GPU slowed by power or heat over [start_s, end_s)."""

    gpu: int
    kind: str
    clock_ratio: float
    start_s: float = 0.0
    end_s: float = math.inf
    power_limit_w: float | None = None

    @property
    def reason_bits(self) -> int:
        from bubblewatch.model.metrics import (
            CLOCKS_EVENT_HW_SLOWDOWN,
            CLOCKS_EVENT_SW_POWER_CAP,
            CLOCKS_EVENT_SW_THERMAL,
        )

        return {
            "power_cap": CLOCKS_EVENT_SW_POWER_CAP,
            "thermal": CLOCKS_EVENT_SW_THERMAL,
            "hw_slowdown": CLOCKS_EVENT_HW_SLOWDOWN,
        }[self.kind]


@dataclass(frozen=True)
class ObservationSpec:
    """How the poller meets the GPUs: per-GPU offset within a tick, jitter, drops, noise."""

    gpu_stagger_s: float = 0.0005
    jitter_s: float = 0.0
    drop_ratio: float = 0.0
    noise_ratio: float = 0.005


@dataclass(frozen=True)
class Scenario:
    """A complete, validated simulation input. Build with `load_scenario`."""

    name: str
    description: str
    engine: str
    engine_argv: tuple[str, ...]
    hardware: HardwareSpec
    model: ModelSpec
    parallel: ParallelSpec
    workload: WorkloadSpec
    spin: SpinSpec = field(default_factory=SpinSpec)
    activity: ActivitySpec = field(default_factory=ActivitySpec)
    faults: tuple[FaultSpec, ...] = ()
    observation: ObservationSpec = field(default_factory=ObservationSpec)
    # The engine release modelled (vLLM's batch queue follows it); None: the newest read.
    engine_version: str | None = None
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def stage_layers(self) -> tuple[int, ...]:
        if self.parallel.layer_partition is not None:
            return self.parallel.layer_partition
        return even_partition(self.model.layers, self.parallel.pp_size)
