"""The one seam to NVML: typed calls through `pynvml`, errors translated and counted.

Everything else in bubblewatch talks to `Nvml`, never to `pynvml`. Units are
converted here (mW -> W, mJ -> J, percent -> ratio, MiB/s -> B/s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from bubblewatch.sources.nvml.errors import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_NOT_FOUND,
    ERROR_TIMEOUT,
    ErrorCounts,
    NvmlError,
    translate,
)

T = TypeVar("T")
Handle = Any  # pynvml's c_nvmlDevice_t
GpmSample = Any  # pynvml's c_nvmlGpmSample_t
EventSet = Any  # pynvml's c_nvmlEventSet_t

FI_POWER_INSTANT = 186
POWER_SCOPE_GPU = 0
TOTAL_POWER_SAMPLES = 0
GPU_UTILIZATION_SAMPLES = 1
CLOCK_SM = 1
TEMPERATURE_GPU = 0
PCIE_TX = 0
PCIE_RX = 1
EVENT_XID_CRITICAL = 0x8
P2P_CAPS_INDEX_NVLINK = 2
GPM_METRICS_GET_VERSION = 1
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_PCIE_TX_PER_SEC = 20
GPM_PCIE_RX_PER_SEC = 21
_MIB = 1024 * 1024
# Codes that are an answer rather than a fault: "nothing new" and "no event yet".
_EXPECTED = {
    "nvmlDeviceGetSamples": (ERROR_NOT_FOUND,),
    "nvmlEventSetWait": (ERROR_TIMEOUT,),
    "nvmlDeviceGetMemoryInfo_v2": (ERROR_FUNCTION_NOT_FOUND,),  # older driver: v1 answers
}


@dataclass(frozen=True)
class XidEvent:
    """An Xid critical error reported by the driver."""

    gpu: int
    xid: int


class Nvml:
    """NVML through pynvml; every failure is an `NvmlError` and counted in `errors`."""

    def __init__(self, errors: ErrorCounts | None = None) -> None:
        self.errors = errors if errors is not None else ErrorCounts()
        # nvmlDeviceGetMemoryInfo_v2 works (None: not tried yet; False: older driver).
        self._memory_v2: bool | None = None

    def _call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            code = int(e.value)
            if code not in _EXPECTED.get(name, ()):
                self.errors.add(name, code)
            raise translate(name, code) from e

    def count(self, name: str, code: int) -> None:
        """Count a per-entry failure (field values, GPM metrics) that raised nothing."""
        self.errors.add(name, code)

    # -- library --
    def init(self) -> None:
        self._call("nvmlInit", pynvml.nvmlInit)

    def shutdown(self) -> None:
        self._call("nvmlShutdown", pynvml.nvmlShutdown)

    def driver_version(self) -> str:
        return str(self._call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))

    def handle(self, index: int) -> Handle:
        return self._call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)

    # -- identity --
    def index(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetIndex", pynvml.nvmlDeviceGetIndex, h))

    def uuid(self, h: Handle) -> str:
        return str(self._call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, h))

    def name(self, h: Handle) -> str:
        return str(self._call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, h))

    def pci_bus_id(self, h: Handle) -> str:
        info = self._call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, h)
        bus = info.busId
        return bus.decode() if isinstance(bus, bytes) else str(bus)

    def power_limit_w(self, h: Handle) -> float:
        fn = pynvml.nvmlDeviceGetEnforcedPowerLimit
        return float(self._call("nvmlDeviceGetEnforcedPowerLimit", fn, h)) / 1000.0

    # -- telemetry --
    def power_avg_w(self, h: Handle) -> float:
        return float(self._call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, h)) / 1e3

    def energy_j(self, h: Handle) -> float:
        fn = pynvml.nvmlDeviceGetTotalEnergyConsumption
        return float(self._call("nvmlDeviceGetTotalEnergyConsumption", fn, h)) / 1e3

    def power_instant_w(self, h: Handle) -> float:
        """Field 186 (instant power, GPU scope); the entry's own return code is checked."""
        name = "nvmlDeviceGetFieldValues"
        values = self._call(
            name, pynvml.nvmlDeviceGetFieldValues, h, [(FI_POWER_INSTANT, POWER_SCOPE_GPU)]
        )
        entry = values[0]
        code = int(entry.nvmlReturn)
        if code != 0:
            self.errors.add(f"{name}[{FI_POWER_INSTANT}]", code)
            raise translate(f"{name}[{FI_POWER_INSTANT}]", code)
        return float(entry.value.uiVal) / 1e3

    def kernel_busy_ratio(self, h: Handle) -> float:
        util = self._call("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, h)
        return float(util.gpu) / 100.0

    def sm_clock_mhz(self, h: Handle) -> float:
        fn = pynvml.nvmlDeviceGetClockInfo
        return float(self._call("nvmlDeviceGetClockInfo", fn, h, CLOCK_SM))

    def clocks_event_reasons(self, h: Handle) -> int:
        fn = pynvml.nvmlDeviceGetCurrentClocksEventReasons
        return int(self._call("nvmlDeviceGetCurrentClocksEventReasons", fn, h))

    def temperature_c(self, h: Handle) -> float:
        fn = pynvml.nvmlDeviceGetTemperature
        return float(self._call("nvmlDeviceGetTemperature", fn, h, TEMPERATURE_GPU))

    def pcie_bytes_per_s(self, h: Handle, counter: int) -> float:
        """nvmlDeviceGetPcieThroughput (KB/s over 20 ms; blocks ~20 ms on real GPUs)."""
        fn = pynvml.nvmlDeviceGetPcieThroughput
        return float(self._call("nvmlDeviceGetPcieThroughput", fn, h, counter)) * 1024.0

    def memory_used_bytes(self, h: Handle) -> float:
        """Device memory allocated (bytes): `used` of nvmlDeviceGetMemoryInfo_v2.

        v2 gives the driver's reserve apart from the allocations and (measured:
        docs/nvml.md) leaves it out of `used`, as nvidia-smi's memory.used does. A
        driver without v2 answers v1, whose `used` includes the reserve (a few
        hundred MB to about 1 GB on an empty card).
        """
        if self._memory_v2 is not False:
            try:
                info = self._call(
                    "nvmlDeviceGetMemoryInfo_v2",
                    pynvml.nvmlDeviceGetMemoryInfo,
                    h,
                    pynvml.nvmlMemory_v2,
                )
            except NvmlError as e:
                if e.code not in (ERROR_FUNCTION_NOT_FOUND, ERROR_ARGUMENT_VERSION_MISMATCH):
                    raise
                self._memory_v2 = False
            else:
                self._memory_v2 = True
                return float(info.used)
        fn = pynvml.nvmlDeviceGetMemoryInfo
        return float(self._call("nvmlDeviceGetMemoryInfo", fn, h).used)

    def samples(self, h: Handle, kind: int, last_seen_us: int) -> list[tuple[int, float]]:
        """Driver-buffered samples newer than `last_seen_us`: (timestamp µs, raw value).

        Raises NvmlNoData when there is nothing new.
        """
        _, rows = self._call(
            "nvmlDeviceGetSamples", pynvml.nvmlDeviceGetSamples, h, kind, last_seen_us
        )
        return [(int(r.timeStamp), float(r.sampleValue.uiVal)) for r in rows]

    # -- GPM --
    def gpm_supported(self, h: Handle) -> bool:
        fn = pynvml.nvmlGpmQueryDeviceSupport
        return bool(self._call("nvmlGpmQueryDeviceSupport", fn, h).isSupportedDevice)

    def gpm_alloc(self) -> GpmSample:
        return self._call("nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc)

    def gpm_free(self, sample: GpmSample) -> None:
        self._call("nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, sample)

    def gpm_sample(self, h: Handle, sample: GpmSample) -> None:
        self._call("nvmlGpmSampleGet", pynvml.nvmlGpmSampleGet, h, sample)

    def gpm_metrics(
        self, first: GpmSample, second: GpmSample, metric_ids: Sequence[int]
    ) -> dict[int, float | NvmlError]:
        """GPM metrics between two samples (raw NVML units: percent, MiB/s), per-entry errors."""
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = GPM_METRICS_GET_VERSION
        req.numMetrics = len(metric_ids)
        req.sample1 = first
        req.sample2 = second
        for i, mid in enumerate(metric_ids):
            req.metrics[i].metricId = mid
        self._call("nvmlGpmMetricsGet", pynvml.nvmlGpmMetricsGet, req)
        out: dict[int, float | NvmlError] = {}
        for i, mid in enumerate(metric_ids):
            m = req.metrics[i]
            code = int(m.nvmlReturn)
            if code == 0:
                out[mid] = float(m.value)
            else:
                self.errors.add(f"nvmlGpmMetricsGet[{mid}]", code)
                out[mid] = translate(f"nvmlGpmMetricsGet[{mid}]", code)
        return out

    # -- Xid events --
    def event_set(self) -> EventSet:
        return self._call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)

    def event_set_free(self, event_set: EventSet) -> None:
        self._call("nvmlEventSetFree", pynvml.nvmlEventSetFree, event_set)

    def register_xid(self, h: Handle, event_set: EventSet) -> None:
        fn = pynvml.nvmlDeviceGetSupportedEventTypes
        supported = int(self._call("nvmlDeviceGetSupportedEventTypes", fn, h))
        if not supported & EVENT_XID_CRITICAL:
            raise translate("nvmlDeviceRegisterEvents", 3, "Xid events not supported")
        self._call(
            "nvmlDeviceRegisterEvents",
            pynvml.nvmlDeviceRegisterEvents,
            h,
            EVENT_XID_CRITICAL,
            event_set,
        )

    def wait_xid(self, event_set: EventSet, timeout_ms: int = 0) -> XidEvent:
        """The next Xid event; raises NvmlTimeout when none arrived within `timeout_ms`."""
        data = self._call("nvmlEventSetWait", pynvml.nvmlEventSetWait, event_set, timeout_ms)
        return XidEvent(gpu=self.index(data.device), xid=int(data.eventData))

    # -- processes and topology (for discovery) --
    def compute_processes(self, h: Handle) -> list[tuple[int, int | None]]:
        """(pid, used GPU memory in bytes or None) of compute processes on the GPU."""
        fn = pynvml.nvmlDeviceGetComputeRunningProcesses
        procs = self._call("nvmlDeviceGetComputeRunningProcesses", fn, h)
        return [
            (int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs
        ]

    def common_ancestor(self, h1: Handle, h2: Handle) -> int:
        fn = pynvml.nvmlDeviceGetTopologyCommonAncestor
        return int(self._call("nvmlDeviceGetTopologyCommonAncestor", fn, h1, h2))

    def nvlink_p2p_ok(self, h1: Handle, h2: Handle) -> bool:
        fn = pynvml.nvmlDeviceGetP2PStatus
        return int(self._call("nvmlDeviceGetP2PStatus", fn, h1, h2, P2P_CAPS_INDEX_NVLINK)) == 0
