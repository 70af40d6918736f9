"""Reads one GPU: the polled metrics of a tick, and the driver's buffered samples.

A reading the GPU turns out not to support is dropped for good and said once;
a transient failure leaves that metric absent for the tick. `NvmlGpuLost`
propagates so the sampler can mark the GPU lost.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Sample
from bubblewatch.sources.nvml.api import (
    GPM_ANY_TENSOR_UTIL,
    GPM_PCIE_RX_PER_SEC,
    GPM_PCIE_TX_PER_SEC,
    GPM_SM_OCCUPANCY,
    GPM_SM_UTIL,
    GPU_UTILIZATION_SAMPLES,
    PCIE_RX,
    PCIE_TX,
    TOTAL_POWER_SAMPLES,
    GpmSample,
    Handle,
    Nvml,
)
from bubblewatch.sources.nvml.capabilities import Capabilities, Capability
from bubblewatch.sources.nvml.errors import NvmlError, NvmlGpuLost, NvmlNoData, NvmlNotSupported

log = logging.getLogger("bubblewatch.nvml")

# GPM metric id -> (bubblewatch metric, factor from NVML's unit to ours).
GPM_METRICS: dict[int, tuple[Metric, float]] = {
    GPM_SM_UTIL: (Metric.SM_ACTIVE_RATIO, 0.01),
    GPM_SM_OCCUPANCY: (Metric.SM_OCCUPANCY_RATIO, 0.01),
    GPM_ANY_TENSOR_UTIL: (Metric.TENSOR_ACTIVE_RATIO, 0.01),
    GPM_PCIE_TX_PER_SEC: (Metric.PCIE_TX_BYTES_PER_S, 1024.0 * 1024.0),
    GPM_PCIE_RX_PER_SEC: (Metric.PCIE_RX_BYTES_PER_S, 1024.0 * 1024.0),
}
GPM_IDS = tuple(GPM_METRICS)
# NVML needs GPM samples more than 100 ms apart; keep a margin for clock skew.
GPM_MIN_INTERVAL_S = 0.1
GPM_MARGIN = 1.05


class GpuReader:
    """Reads one GPU through `Nvml`; keeps GPM and sample-buffer state between ticks."""

    def __init__(
        self,
        nvml: Nvml,
        gpu: int,
        handle: Handle,
        caps: Capabilities,
        *,
        start_wall_s: float,
        gpm_min_interval_s: float = GPM_MIN_INTERVAL_S,
        sample_buffers: bool = True,
    ) -> None:
        self.nvml = nvml
        self.gpu = gpu
        self.handle = handle
        self.caps = caps
        self.gpm_min_interval_s = max(gpm_min_interval_s, GPM_MIN_INTERVAL_S)
        self.sample_buffers = sample_buffers
        self._gpm_prev: GpmSample | None = None
        self._gpm_next: GpmSample | None = None
        self._gpm_prev_s = float("-inf")
        # Only samples the driver takes from now on; older ones predate the recording.
        start_us = int(start_wall_s * 1e6)
        self._last_seen_us = {TOTAL_POWER_SAMPLES: start_us, GPU_UTILIZATION_SAMPLES: start_us}
        if caps.has(Capability.GPM):
            self._gpm_prev = nvml.gpm_alloc()
            self._gpm_next = nvml.gpm_alloc()

    def close(self) -> None:
        for s in (self._gpm_prev, self._gpm_next):
            if s is not None:
                with contextlib.suppress(NvmlError):
                    self.nvml.gpm_free(s)
        self._gpm_prev = self._gpm_next = None

    def _drop(self, cap: Capability, err: NvmlError) -> None:
        """Stop asking for a capability the GPU refused, and say so once."""
        if self.caps.has(cap):
            self.caps = self.caps.without(cap, str(err))
            log.warning(
                "GPU %d: %s stopped working, its metrics stay absent: %s", self.gpu, cap.value, err
            )

    def _try(self, cap: Capability, fn: Callable[[], float]) -> float | None:
        if not self.caps.has(cap):
            return None
        try:
            return fn()
        except NvmlGpuLost:
            raise
        except NvmlNotSupported as e:
            self._drop(cap, e)
        except NvmlError:
            pass  # counted by Nvml; absent this tick
        return None

    def read(self, mono_s: float) -> dict[Metric, float]:
        """The polled metrics now. GPM metrics only when the last GPM sample is old enough."""
        nvml, h = self.nvml, self.handle
        out: dict[Metric, float] = {}
        simple: tuple[tuple[Capability, Metric, Callable[[], float]], ...] = (
            (Capability.INSTANT_POWER, Metric.POWER_INSTANT_W, lambda: nvml.power_instant_w(h)),
            (Capability.AVG_POWER, Metric.POWER_AVG_W, lambda: nvml.power_avg_w(h)),
            (Capability.ENERGY, Metric.ENERGY_J, lambda: nvml.energy_j(h)),
            (Capability.UTILIZATION, Metric.KERNEL_BUSY_RATIO, lambda: nvml.kernel_busy_ratio(h)),
            (Capability.SM_CLOCK, Metric.SM_CLOCK_MHZ, lambda: nvml.sm_clock_mhz(h)),
            (
                Capability.CLOCKS_EVENTS,
                Metric.CLOCKS_EVENT_REASONS,
                lambda: float(nvml.clocks_event_reasons(h)),
            ),
            (Capability.TEMPERATURE, Metric.TEMPERATURE_C, lambda: nvml.temperature_c(h)),
            (Capability.MEMORY, Metric.MEMORY_USED_BYTES, lambda: nvml.memory_used_bytes(h)),
            (
                Capability.PCIE_THROUGHPUT,
                Metric.PCIE_TX_BYTES_PER_S,
                lambda: nvml.pcie_bytes_per_s(h, PCIE_TX),
            ),
            (
                Capability.PCIE_THROUGHPUT,
                Metric.PCIE_RX_BYTES_PER_S,
                lambda: nvml.pcie_bytes_per_s(h, PCIE_RX),
            ),
        )
        for cap, metric, fn in simple:
            v = self._try(cap, fn)
            if v is not None:
                out[metric] = v
        out.update(self._read_gpm(mono_s))
        return out

    def _read_gpm(self, mono_s: float) -> dict[Metric, float]:
        if not self.caps.has(Capability.GPM) or self._gpm_next is None:
            return {}
        if mono_s - self._gpm_prev_s < self.gpm_min_interval_s * GPM_MARGIN:
            return {}
        try:
            self.nvml.gpm_sample(self.handle, self._gpm_next)
        except NvmlGpuLost:
            raise
        except NvmlNotSupported as e:
            self._drop(Capability.GPM, e)
            return {}
        except NvmlError:
            return {}
        first = self._gpm_prev_s > float("-inf")
        prev, self._gpm_prev, self._gpm_next = self._gpm_prev, self._gpm_next, self._gpm_prev
        self._gpm_prev_s = mono_s
        if not first:
            return {}  # one sample only: the first interval ends at the next tick
        try:
            got = self.nvml.gpm_metrics(prev, self._gpm_prev, GPM_IDS)
        except NvmlGpuLost:
            raise
        except NvmlError:
            return {}
        out: dict[Metric, float] = {}
        for mid, value in got.items():
            if isinstance(value, float):
                metric, factor = GPM_METRICS[mid]
                out[metric] = value * factor
        return out

    def drain_buffers(self) -> list[Sample]:
        """New driver-buffered power and utilisation samples, one row per timestamp."""
        if not self.sample_buffers:
            return []
        rows: dict[int, dict[Metric, float]] = {}
        for cap, kind, metric, factor in (
            (Capability.POWER_SAMPLES, TOTAL_POWER_SAMPLES, Metric.POWER_INSTANT_W, 1e-3),
            (Capability.UTIL_SAMPLES, GPU_UTILIZATION_SAMPLES, Metric.KERNEL_BUSY_RATIO, 1e-2),
        ):
            if not self.caps.has(cap):
                continue
            try:
                got = self.nvml.samples(self.handle, kind, self._last_seen_us[kind])
            except NvmlNoData:
                continue
            except NvmlGpuLost:
                raise
            except NvmlNotSupported as e:
                self._drop(cap, e)
                continue
            except NvmlError:
                continue
            for ts_us, raw in got:
                if ts_us > self._last_seen_us[kind]:
                    rows.setdefault(ts_us, {})[metric] = raw * factor
            if got:
                self._last_seen_us[kind] = max(self._last_seen_us[kind], *(t for t, _ in got))
        return [Sample(ts / 1e6, self.gpu, vals, "buffer") for ts, vals in sorted(rows.items())]
