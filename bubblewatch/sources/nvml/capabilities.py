"""What each GPU can report, probed once at start so unsupported metrics stay absent."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from bubblewatch.model.metrics import Metric
from bubblewatch.sources.nvml.api import (
    GPU_UTILIZATION_SAMPLES,
    PCIE_RX,
    TOTAL_POWER_SAMPLES,
    Handle,
    Nvml,
)
from bubblewatch.sources.nvml.errors import NvmlError, NvmlGpuLost, NvmlNoData, NvmlNotSupported

log = logging.getLogger("bubblewatch.nvml")


class Capability(str, Enum):
    """One NVML reading a GPU may or may not support."""

    INSTANT_POWER = "instant_power"  # field 186
    AVG_POWER = "avg_power"  # nvmlDeviceGetPowerUsage
    ENERGY = "energy"
    GPM = "gpm"  # SM activity, occupancy, tensor activity, PCIe rates
    UTILIZATION = "utilization"  # utilization.gpu
    POWER_SAMPLES = "power_samples"  # nvmlDeviceGetSamples(TOTAL_POWER_SAMPLES)
    UTIL_SAMPLES = "util_samples"  # nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES)
    SM_CLOCK = "sm_clock"
    CLOCKS_EVENTS = "clocks_events"
    TEMPERATURE = "temperature"
    PCIE_THROUGHPUT = "pcie_throughput"  # fallback for PCIe rates when there is no GPM
    MEMORY = "memory"  # nvmlDeviceGetMemoryInfo(_v2)


# Metrics each capability provides.
PROVIDES: dict[Capability, tuple[Metric, ...]] = {
    Capability.INSTANT_POWER: (Metric.POWER_INSTANT_W,),
    Capability.AVG_POWER: (Metric.POWER_AVG_W,),
    Capability.ENERGY: (Metric.ENERGY_J,),
    Capability.GPM: (
        Metric.SM_ACTIVE_RATIO,
        Metric.SM_OCCUPANCY_RATIO,
        Metric.TENSOR_ACTIVE_RATIO,
        Metric.PCIE_TX_BYTES_PER_S,
        Metric.PCIE_RX_BYTES_PER_S,
    ),
    Capability.UTILIZATION: (Metric.KERNEL_BUSY_RATIO,),
    Capability.POWER_SAMPLES: (Metric.POWER_INSTANT_W,),
    Capability.UTIL_SAMPLES: (Metric.KERNEL_BUSY_RATIO,),
    Capability.SM_CLOCK: (Metric.SM_CLOCK_MHZ,),
    Capability.CLOCKS_EVENTS: (Metric.CLOCKS_EVENT_REASONS,),
    Capability.TEMPERATURE: (Metric.TEMPERATURE_C,),
    Capability.PCIE_THROUGHPUT: (Metric.PCIE_TX_BYTES_PER_S, Metric.PCIE_RX_BYTES_PER_S),
    Capability.MEMORY: (Metric.MEMORY_USED_BYTES,),
}


@dataclass(frozen=True)
class Capabilities:
    """The capabilities one GPU supports, and why the others are missing."""

    gpu: int
    supported: frozenset[Capability]
    missing: tuple[tuple[Capability, str], ...] = ()

    def has(self, cap: Capability) -> bool:
        return cap in self.supported

    def without(self, cap: Capability, reason: str) -> Capabilities:
        return Capabilities(self.gpu, self.supported - {cap}, (*self.missing, (cap, reason)))

    @property
    def metrics(self) -> frozenset[Metric]:
        return frozenset(m for c in self.supported for m in PROVIDES[c])

    def to_dict(self) -> dict[str, object]:
        return {
            "supported": sorted(c.value for c in self.supported),
            "missing": {c.value: why for c, why in self.missing},
        }


def probe(nvml: Nvml, gpu: int, h: Handle, *, with_pcie_fallback: bool = True) -> Capabilities:
    """Try each reading once. Raises NvmlGpuLost if the GPU is gone."""
    checks: dict[Capability, Callable[[], object]] = {
        Capability.INSTANT_POWER: lambda: nvml.power_instant_w(h),
        Capability.AVG_POWER: lambda: nvml.power_avg_w(h),
        Capability.ENERGY: lambda: nvml.energy_j(h),
        Capability.GPM: lambda: _gpm_check(nvml, h),
        Capability.UTILIZATION: lambda: nvml.kernel_busy_ratio(h),
        Capability.POWER_SAMPLES: lambda: _samples_check(nvml, h, TOTAL_POWER_SAMPLES),
        Capability.UTIL_SAMPLES: lambda: _samples_check(nvml, h, GPU_UTILIZATION_SAMPLES),
        Capability.SM_CLOCK: lambda: nvml.sm_clock_mhz(h),
        Capability.CLOCKS_EVENTS: lambda: nvml.clocks_event_reasons(h),
        Capability.TEMPERATURE: lambda: nvml.temperature_c(h),
        Capability.MEMORY: lambda: nvml.memory_used_bytes(h),
    }
    supported: set[Capability] = set()
    missing: list[tuple[Capability, str]] = []
    for cap, check in checks.items():
        try:
            check()
        except NvmlGpuLost:
            raise
        except NvmlError as e:
            missing.append((cap, str(e)))
        else:
            supported.add(cap)
    if with_pcie_fallback and Capability.GPM not in supported:
        try:
            nvml.pcie_bytes_per_s(h, PCIE_RX)
        except NvmlGpuLost:
            raise
        except NvmlError as e:
            missing.append((Capability.PCIE_THROUGHPUT, str(e)))
        else:
            supported.add(Capability.PCIE_THROUGHPUT)
    caps = Capabilities(gpu, frozenset(supported), tuple(missing))
    for cap, why in caps.missing:
        log.info("GPU %d: %s not available, its metrics stay absent (%s)", gpu, cap.value, why)
    return caps


def _gpm_check(nvml: Nvml, h: Handle) -> None:
    if not nvml.gpm_supported(h):
        raise NvmlNotSupported("nvmlGpmQueryDeviceSupport", 3, "device does not support GPM")
    sample = nvml.gpm_alloc()
    try:
        nvml.gpm_sample(h, sample)
    finally:
        nvml.gpm_free(sample)


def _samples_check(nvml: Nvml, h: Handle, kind: int) -> None:
    with contextlib.suppress(NvmlNoData):  # supported, the buffer is merely empty right now
        nvml.samples(h, kind, 0)
