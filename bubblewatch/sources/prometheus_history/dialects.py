"""The GPU exporters bubblewatch reads from Prometheus, declared once as data.

Each dialect names the series that map to bubblewatch metrics (with the
scale to base units) and the labels that identify a GPU. Unit notes:
dcgm-exporter reports `DCGM_FI_DEV_GPU_UTIL` in percent and power in W;
nvidia_gpu_exporter reports ratios 0..1 and clocks in Hz; nvitop-exporter
(prometheus_client with `unit=`) appends the unit to the name
(`gpu_power_usage_W`, `gpu_utilization_Percentage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bubblewatch.model.exported import GPU_METRICS
from bubblewatch.model.metrics import Metric


@dataclass(frozen=True)
class SeriesSpec:
    """One exporter series: its name, the metric it becomes, and value * scale = base unit."""

    name: str
    metric: Metric
    scale: float = 1.0
    # Averaging a bitmask over time makes no sense: such series are read as sampled.
    average: bool = True


@dataclass(frozen=True)
class Dialect:
    """How one exporter names its per-GPU series and labels."""

    name: str
    series: tuple[SeriesSpec, ...]
    gpu_label: str | None  # NVML index on the host, if the exporter labels it
    uuid_label: str | None
    name_label: str | None
    host_labels: tuple[str, ...]  # first present wins; Prometheus's `instance` last

    @property
    def probe(self) -> SeriesSpec:
        """The series whose presence says this exporter is scraped (its first one)."""
        return self.series[0]


DCGM = Dialect(
    name="dcgm",
    series=(
        SeriesSpec("DCGM_FI_DEV_POWER_USAGE", Metric.POWER_AVG_W),
        SeriesSpec("DCGM_FI_PROF_SM_ACTIVE", Metric.SM_ACTIVE_RATIO),
        SeriesSpec("DCGM_FI_PROF_SM_OCCUPANCY", Metric.SM_OCCUPANCY_RATIO),
        SeriesSpec("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Metric.TENSOR_ACTIVE_RATIO),
        SeriesSpec("DCGM_FI_DEV_GPU_UTIL", Metric.KERNEL_BUSY_RATIO, 0.01),
        SeriesSpec("DCGM_FI_DEV_POWER_USAGE_INSTANT", Metric.POWER_INSTANT_W),
        SeriesSpec("DCGM_FI_DEV_SM_CLOCK", Metric.SM_CLOCK_MHZ),
        SeriesSpec("DCGM_FI_DEV_GPU_TEMP", Metric.TEMPERATURE_C),
        SeriesSpec("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", Metric.CLOCKS_EVENT_REASONS, average=False),
        SeriesSpec(
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Metric.CLOCKS_EVENT_REASONS, average=False
        ),
        SeriesSpec("DCGM_FI_PROF_PCIE_TX_BYTES", Metric.PCIE_TX_BYTES_PER_S),
        SeriesSpec("DCGM_FI_PROF_PCIE_RX_BYTES", Metric.PCIE_RX_BYTES_PER_S),
    ),
    gpu_label="gpu",
    uuid_label="UUID",
    name_label="modelName",
    host_labels=("Hostname", "instance"),
)

NVIDIA_GPU_EXPORTER = Dialect(
    name="nvidia_gpu_exporter",
    series=(
        SeriesSpec("nvidia_smi_power_draw_watts", Metric.POWER_AVG_W),
        SeriesSpec("nvidia_smi_power_draw_instant_watts", Metric.POWER_INSTANT_W),
        SeriesSpec("nvidia_smi_utilization_gpu_ratio", Metric.KERNEL_BUSY_RATIO),
        SeriesSpec("nvidia_smi_clocks_current_sm_clock_hz", Metric.SM_CLOCK_MHZ, 1e-6),
        SeriesSpec("nvidia_smi_temperature_gpu", Metric.TEMPERATURE_C),
    ),
    gpu_label=None,
    uuid_label="uuid",
    name_label="name",
    host_labels=("instance",),
)

NVITOP = Dialect(
    name="nvitop",
    series=(
        SeriesSpec("gpu_power_usage_W", Metric.POWER_AVG_W),
        SeriesSpec("gpu_utilization_Percentage", Metric.KERNEL_BUSY_RATIO, 0.01),
        SeriesSpec("gpu_clock_sm_MHz", Metric.SM_CLOCK_MHZ),
        SeriesSpec("gpu_temperature_C", Metric.TEMPERATURE_C),
        SeriesSpec("gpu_pcie_tx_throughput_MiBps", Metric.PCIE_TX_BYTES_PER_S, 1024.0 * 1024.0),
        SeriesSpec("gpu_pcie_rx_throughput_MiBps", Metric.PCIE_RX_BYTES_PER_S, 1024.0 * 1024.0),
    ),
    gpu_label="index",
    uuid_label="uuid",
    name_label="devicename",
    host_labels=("hostname", "instance"),
)


def _bubblewatch() -> Dialect:
    first = {Metric.POWER_INSTANT_W: 0}
    ordered = sorted(GPU_METRICS, key=lambda m: first.get(m.telemetry, 1))
    return Dialect(
        name="bubblewatch",
        series=tuple(
            SeriesSpec(
                m.name,
                m.telemetry,
                1.0 / m.scale,
                average=m.kind == "gauge" and m.telemetry is not Metric.CLOCKS_EVENT_REASONS,
            )
            for m in ordered
            if m.telemetry is not Metric.ENERGY_J
        ),
        gpu_label="gpu",
        uuid_label="uuid",
        name_label="name",
        host_labels=("host", "instance"),
    )


def dialects() -> dict[str, Dialect]:
    """Known dialects in the order `auto` tries them."""
    bw = _bubblewatch()
    return {d.name: d for d in (bw, DCGM, NVITOP, NVIDIA_GPU_EXPORTER)}
