"""The per-GPU metrics bubblewatch knows, with their units and NVML/DCGM origins.

A metric a GPU does not report is *absent* from a sample, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Metric(str, Enum):
    """Names of per-GPU telemetry fields; the value is the trace-file key."""

    POWER_INSTANT_W = "power_instant_w"
    POWER_AVG_W = "power_avg_w"
    ENERGY_J = "energy_j"
    SM_ACTIVE_RATIO = "sm_active_ratio"
    SM_OCCUPANCY_RATIO = "sm_occupancy_ratio"
    TENSOR_ACTIVE_RATIO = "tensor_active_ratio"
    KERNEL_BUSY_RATIO = "kernel_busy_ratio"
    SM_CLOCK_MHZ = "sm_clock_mhz"
    CLOCKS_EVENT_REASONS = "clocks_event_reasons"
    TEMPERATURE_C = "temperature_c"
    PCIE_TX_BYTES_PER_S = "pcie_tx_bytes_per_s"
    PCIE_RX_BYTES_PER_S = "pcie_rx_bytes_per_s"
    MEMORY_USED_BYTES = "memory_used_bytes"


@dataclass(frozen=True)
class MetricSpec:
    """What a metric means and where it comes from."""

    metric: Metric
    unit: str
    description: str
    nvml: str
    lower: float | None = 0.0
    upper: float | None = None


METRICS: dict[Metric, MetricSpec] = {
    s.metric: s
    for s in (
        MetricSpec(
            Metric.POWER_INSTANT_W,
            "W",
            "instantaneous board power",
            "nvmlDeviceGetFieldValues(NVML_FI_DEV_POWER_INSTANT=186)",
        ),
        MetricSpec(
            Metric.POWER_AVG_W,
            "W",
            "board power averaged over 1 s (Ampere and newer, except GA100)",
            "nvmlDeviceGetPowerUsage",
        ),
        MetricSpec(
            Metric.ENERGY_J,
            "J",
            "energy counter since driver load (monotonic)",
            "nvmlDeviceGetTotalEnergyConsumption",
        ),
        MetricSpec(
            Metric.SM_ACTIVE_RATIO,
            "ratio",
            "fraction of SM-cycles with a warp resident, averaged over the poll interval",
            "GPM SM_UTIL (2) / DCGM_FI_PROF_SM_ACTIVE (1002)",
            upper=1.0,
        ),
        MetricSpec(
            Metric.SM_OCCUPANCY_RATIO,
            "ratio",
            "resident warps over the maximum, averaged over the poll interval",
            "GPM SM_OCCUPANCY (3) / DCGM_FI_PROF_SM_OCCUPANCY (1003)",
            upper=1.0,
        ),
        MetricSpec(
            Metric.TENSOR_ACTIVE_RATIO,
            "ratio",
            "fraction of cycles any tensor pipe was active",
            "GPM ANY_TENSOR_UTIL (5) / DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (1004)",
            upper=1.0,
        ),
        MetricSpec(
            Metric.KERNEL_BUSY_RATIO,
            "ratio",
            "fraction of the driver's sample period in which any kernel ran "
            "(utilization.gpu; counts NCCL spin kernels as busy)",
            "nvmlDeviceGetUtilizationRates().gpu / DCGM_FI_DEV_GPU_UTIL (203)",
            upper=1.0,
        ),
        MetricSpec(Metric.SM_CLOCK_MHZ, "MHz", "current SM clock", "nvmlDeviceGetClockInfo(SM)"),
        MetricSpec(
            Metric.CLOCKS_EVENT_REASONS,
            "bitmask",
            "clocks event (throttle) reasons bitmask",
            "nvmlDeviceGetCurrentClocksEventReasons",
            upper=None,
        ),
        MetricSpec(Metric.TEMPERATURE_C, "C", "GPU core temperature", "nvmlDeviceGetTemperature"),
        MetricSpec(
            Metric.PCIE_TX_BYTES_PER_S,
            "B/s",
            "PCIe transmit throughput",
            "GPM PCIE_TX_PER_SEC (20) / nvmlDeviceGetPcieThroughput",
        ),
        MetricSpec(
            Metric.PCIE_RX_BYTES_PER_S,
            "B/s",
            "PCIe receive throughput",
            "GPM PCIE_RX_PER_SEC (21) / nvmlDeviceGetPcieThroughput",
        ),
        MetricSpec(
            Metric.MEMORY_USED_BYTES,
            "B",
            "device memory in use (a loaded model shows here while the GPU idles)",
            "nvmlDeviceGetMemoryInfo_v2().used / DCGM_FI_DEV_FB_USED (252)",
        ),
    )
}

# Clocks event reason bits (nvmlClocksEventReason*), docs/nvml.md.
CLOCKS_EVENT_GPU_IDLE = 0x1
CLOCKS_EVENT_SW_POWER_CAP = 0x4
CLOCKS_EVENT_HW_SLOWDOWN = 0x8
CLOCKS_EVENT_SW_THERMAL = 0x20
CLOCKS_EVENT_HW_THERMAL = 0x40
CLOCKS_EVENT_HW_POWER_BRAKE = 0x80

CLOCKS_EVENT_NAMES: dict[int, str] = {
    CLOCKS_EVENT_GPU_IDLE: "gpu_idle",
    CLOCKS_EVENT_SW_POWER_CAP: "sw_power_cap",
    CLOCKS_EVENT_HW_SLOWDOWN: "hw_slowdown",
    CLOCKS_EVENT_SW_THERMAL: "sw_thermal",
    CLOCKS_EVENT_HW_THERMAL: "hw_thermal",
    CLOCKS_EVENT_HW_POWER_BRAKE: "hw_power_brake",
}

# Reasons that mean the GPU is slowed by power or heat (not merely idle).
THROTTLE_MASK = (
    CLOCKS_EVENT_SW_POWER_CAP
    | CLOCKS_EVENT_HW_SLOWDOWN
    | CLOCKS_EVENT_SW_THERMAL
    | CLOCKS_EVENT_HW_THERMAL
    | CLOCKS_EVENT_HW_POWER_BRAKE
)


def clocks_event_names(bits: int) -> list[str]:
    """Names of the reason bits set in `bits`, lowest bit first."""
    return [name for bit, name in sorted(CLOCKS_EVENT_NAMES.items()) if bits & bit]


def parse_metric(name: str) -> Metric:
    """The Metric called `name`, or ValueError naming the known ones."""
    try:
        return Metric(name)
    except ValueError:
        known = ", ".join(m.value for m in Metric)
        raise ValueError(f"unknown metric {name!r} (known: {known})") from None
