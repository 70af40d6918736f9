"""The names bubblewatch exports its GPU telemetry under, shared by writer and reader.

The Prometheus exporter (sinks/prometheus.py) publishes each telemetry field
under these names; the Prometheus history reader
(sources/prometheus_history/dialects.py) reads the daemon's own series back by
them. Declared once here, on the ground floor, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bubblewatch.model.metrics import Metric

GPU_INFO = "bubblewatch_gpu_info"  # identity series: gpu, uuid, name, pci_bus_id, pipeline, stage


@dataclass(frozen=True)
class ExportedGpuMetric:
    """How one telemetry field becomes a per-GPU metric."""

    telemetry: Metric
    name: str
    kind: Literal["gauge", "counter"]
    help: str
    scale: float = 1.0


GPU_METRICS: tuple[ExportedGpuMetric, ...] = (
    ExportedGpuMetric(Metric.POWER_INSTANT_W, "bubblewatch_gpu_power_watts", "gauge",
                      "Instantaneous board power."),
    ExportedGpuMetric(Metric.POWER_AVG_W, "bubblewatch_gpu_power_average_watts", "gauge",
                      "Board power averaged by the driver over 1 s."),
    ExportedGpuMetric(Metric.ENERGY_J, "bubblewatch_gpu_energy_joules_total", "counter",
                      "Energy consumed since the driver loaded."),
    ExportedGpuMetric(Metric.SM_ACTIVE_RATIO, "bubblewatch_gpu_sm_active_ratio", "gauge",
                      "Fraction of SM cycles with a resident warp (GPM SM_UTIL)."),
    ExportedGpuMetric(Metric.SM_OCCUPANCY_RATIO, "bubblewatch_gpu_sm_occupancy_ratio", "gauge",
                      "Resident warps over the maximum (GPM SM_OCCUPANCY)."),
    ExportedGpuMetric(Metric.TENSOR_ACTIVE_RATIO, "bubblewatch_gpu_tensor_active_ratio", "gauge",
                      "Fraction of cycles any tensor pipe was active."),
    ExportedGpuMetric(Metric.KERNEL_BUSY_RATIO, "bubblewatch_gpu_kernel_busy_ratio", "gauge",
                      "Fraction of time any kernel ran (utilization.gpu; counts NCCL spin as "
                      "busy)."),
    ExportedGpuMetric(Metric.SM_CLOCK_MHZ, "bubblewatch_gpu_sm_clock_hertz", "gauge",
                      "Current SM clock.", scale=1e6),
    ExportedGpuMetric(Metric.TEMPERATURE_C, "bubblewatch_gpu_temperature_celsius", "gauge",
                      "GPU core temperature."),
    ExportedGpuMetric(Metric.PCIE_TX_BYTES_PER_S, "bubblewatch_gpu_pcie_transmit_bytes_per_second",
                      "gauge", "PCIe transmit throughput."),
    ExportedGpuMetric(Metric.PCIE_RX_BYTES_PER_S, "bubblewatch_gpu_pcie_receive_bytes_per_second",
                      "gauge", "PCIe receive throughput."),
)  # fmt: skip
