"""Write simulator timeline files (docs/timeline-format.md) from numpy arrays, for tests.

Stands in for the simulator's `timeline.write(path)`; follows the same contract.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAGIC = b"BWTLINE1"
FIELDS = (
    "power_w",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "kernel_busy",
    "sm_clock_mhz",
    "clocks_event_reasons",
    "temperature_c",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
F = {name: i for i, name in enumerate(FIELDS)}


@dataclass(frozen=True)
class Timeline:
    """Per-GPU physical state: data[gpu, field, cell] (cell means), cells of dt_s."""

    data: npt.NDArray[np.float32]
    dt_s: float = 0.005
    power_limit_w: float = 700.0
    idle_power_w: float = 80.0
    name: str = "NVIDIA H200 (fake)"

    @property
    def n_gpus(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_cells(self) -> int:
        return int(self.data.shape[2])

    @property
    def length_s(self) -> float:
        return self.n_cells * self.dt_s

    def field(self, gpu: int, name: str) -> npt.NDArray[np.float64]:
        return self.data[gpu, F[name]].astype(np.float64)

    def mean(self, gpu: int, name: str, a_s: float, b_s: float) -> float:
        """Exact mean of a field over timeline time [a_s, b_s) (looping), as the fake computes."""
        x = self.field(gpu, name)
        cum = np.concatenate([[0.0], np.cumsum(x)])

        def integral(t: float) -> float:
            k = np.floor(t / self.length_s)
            r = t - k * self.length_s
            c = min(int(r / self.dt_s), self.n_cells - 1)
            return float(k * cum[-1] * self.dt_s + cum[c] * self.dt_s + (r - c * self.dt_s) * x[c])

        return (integral(b_s) - integral(a_s)) / (b_s - a_s)

    def at(self, gpu: int, name: str, t_s: float) -> float:
        r = t_s % self.length_s
        return float(self.field(gpu, name)[min(int(r / self.dt_s), self.n_cells - 1)])

    def write(self, path: Path) -> Path:
        n_gpus, n_fields, n_cells = self.data.shape
        with open(path, "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<IIQdd", n_gpus, n_fields, n_cells, 0.0, self.dt_s))
            for g in range(n_gpus):
                uuid = f"GPU-fake0000-0000-0000-0000-{g:012d}".encode()
                f.write(uuid.ljust(96, b"\0"))
                f.write(self.name.encode().ljust(96, b"\0"))
                f.write(struct.pack("<dd", self.power_limit_w, self.idle_power_w))
            f.write(np.ascontiguousarray(self.data, dtype="<f4").tobytes())
        return path


def serialized_pipeline(
    n_gpus: int = 4,
    *,
    seconds: float = 4.0,
    dt_s: float = 0.005,
    stage_s: float = 0.05,
    busy_power_w: float = 450.0,
    idle_power_w: float = 80.0,
) -> Timeline:
    """A one-micro-batch pipeline: stage s computes during slot s of each round, in turn."""
    n_cells = round(seconds / dt_s)
    t = np.arange(n_cells) * dt_s
    slot = (np.floor(t / stage_s).astype(np.int64)) % n_gpus
    data = np.zeros((n_gpus, len(FIELDS), n_cells), dtype=np.float32)
    for g in range(n_gpus):
        on = (slot == g).astype(np.float32)
        data[g, F["power_w"]] = idle_power_w + (busy_power_w - idle_power_w) * on
        data[g, F["sm_active"]] = 0.9 * on
        data[g, F["sm_occupancy"]] = 0.4 * on
        data[g, F["tensor_active"]] = 0.6 * on
        # Waiting stages spin in an NCCL receive: a kernel runs all the time.
        data[g, F["kernel_busy"]] = 1.0
        data[g, F["sm_clock_mhz"]] = 1980.0
        data[g, F["clocks_event_reasons"]] = np.where(on > 0, 0, 1)
        data[g, F["temperature_c"]] = 50.0 + g
        data[g, F["pcie_tx_bytes_per_s"]] = 2.0e9 * on
        data[g, F["pcie_rx_bytes_per_s"]] = 1.0e9 * on
    return Timeline(data, dt_s=dt_s, idle_power_w=idle_power_w)


def ramp(n_gpus: int = 2, *, seconds: float = 10.0, dt_s: float = 0.005) -> Timeline:
    """Fields that change smoothly and differ per GPU, so averaging windows are testable."""
    n_cells = round(seconds / dt_s)
    t = (np.arange(n_cells) + 0.5) * dt_s
    data = np.zeros((n_gpus, len(FIELDS), n_cells), dtype=np.float32)
    for g in range(n_gpus):
        phase = 2 * np.pi * (t / seconds + g / max(n_gpus, 1))
        wave = 0.5 + 0.5 * np.sin(phase)
        data[g, F["power_w"]] = 100.0 + 400.0 * wave
        data[g, F["sm_active"]] = wave
        data[g, F["sm_occupancy"]] = 0.5 * wave
        data[g, F["tensor_active"]] = 0.25 * wave
        data[g, F["kernel_busy"]] = np.clip(wave + 0.1, 0, 1)
        data[g, F["sm_clock_mhz"]] = 1500.0 + 100.0 * g
        data[g, F["clocks_event_reasons"]] = 4.0 if g == 1 else 0.0
        data[g, F["temperature_c"]] = 40.0 + 10.0 * wave
        data[g, F["pcie_tx_bytes_per_s"]] = 1.0e9 * wave
        data[g, F["pcie_rx_bytes_per_s"]] = 0.5e9 * wave
    return Timeline(data, dt_s=dt_s)
