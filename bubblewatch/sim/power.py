"""The power, clock and temperature model: activity in, NVML-visible physics out.

power = idle + (spin - idle) * kernel_busy
        + (peak - spin) * (a * sm_active + b * tensor_active) * clock_ratio^2
capped at the power limit (the fault's cap where one applies). A capped cell
lowers the SM clock by the cube root of the excess (dynamic power ~ f * V^2,
V ~ f) and sets SwPowerCap. A GPU with no kernel for the trailing 100 ms drops
to its idle clock and sets GpuIdle. Temperature follows power through a first
order lag (time constant `thermal_tau_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE, CLOCKS_EVENT_SW_POWER_CAP
from bubblewatch.sim.activity import Activity
from bubblewatch.sim.grid import cell_means
from bubblewatch.sim.spec import ActivitySpec, FaultSpec, GpuSpec

FloatArray = npt.NDArray[np.float64]
IDLE_AFTER_S = 0.1
THERMAL_FAULT_AMBIENT_RISE_C = 35.0


class _HasGpu(Protocol):
    @property
    def gpu(self) -> GpuSpec: ...


class PhysicsInputs(Protocol):
    """What the physics needs of a scenario (serving or training): GPU, activity weights, faults."""

    @property
    def hardware(self) -> _HasGpu: ...
    @property
    def activity(self) -> ActivitySpec: ...
    @property
    def faults(self) -> tuple[FaultSpec, ...]: ...


@dataclass(frozen=True)
class Physics:
    """(n_gpus, n_cells) power, SM clock, reasons bitmask and temperature."""

    power_w: FloatArray
    sm_clock_mhz: FloatArray
    clocks_event_reasons: FloatArray
    temperature_c: FloatArray


@dataclass
class PhysicsCarry:
    """What the physics of one part of a timeline hands to the next (a run simulated in parts).

    `first_cell` and `total_cells` place the part; the temperature filter's state
    and the last cells' kernel activity (for GpuIdle) carry over.
    """

    total_cells: int
    first_cell: int = 0
    temperature_state: list[FloatArray] | None = None
    busy_tail: npt.NDArray[np.bool_] | None = None


def fault_cover(
    f: FaultSpec, n_cells: int, dt_s: float, first_cell: int = 0, total_cells: int | None = None
) -> FloatArray:
    """Fraction of each cell inside the fault's window (cells from `first_cell` on)."""
    end = min(f.end_s, ((n_cells if total_cells is None else total_cells) + 1) * dt_s)
    start, stop = np.array([f.start_s]), np.array([end])
    return np.clip(cell_means(start, stop, 1.0, n_cells, dt_s, first_cell=first_cell), 0.0, 1.0)


def physics(
    sc: PhysicsInputs, act: Activity, dt_s: float, carry: PhysicsCarry | None = None
) -> Physics:
    """The physics of `act`'s cells; with `carry`, a part of a longer run (updated in place)."""
    gpu, a = sc.hardware.gpu, sc.activity
    n_gpus, n_cells = act.kernel_busy.shape
    first = 0 if carry is None else carry.first_cell
    total = None if carry is None else carry.total_cells
    clock_ratio = np.ones((n_gpus, n_cells))
    limit = np.full((n_gpus, n_cells), gpu.power_limit_w)
    bits = np.zeros((n_gpus, n_cells), dtype=np.int64)
    ambient = np.full((n_gpus, n_cells), gpu.ambient_c)
    for f in sc.faults:
        cover = fault_cover(f, n_cells, dt_s, first, total)
        on = cover > 0
        clock_ratio[f.gpu] -= (1.0 - f.clock_ratio) * cover
        bits[f.gpu, on] |= f.reason_bits
        if f.power_limit_w is not None:
            limit[f.gpu, on] = np.minimum(limit[f.gpu, on], f.power_limit_w)
        if f.kind == "thermal":
            ambient[f.gpu] += THERMAL_FAULT_AMBIENT_RISE_C * cover
    dyn = (gpu.peak_power_w - gpu.spin_power_w) * (
        a.power_sm_weight * act.sm_active + a.power_tensor_weight * act.tensor_active
    )
    raw = gpu.idle_power_w + (gpu.spin_power_w - gpu.idle_power_w) * act.kernel_busy
    raw = raw + dyn * clock_ratio**2
    capped = raw > limit
    power = np.minimum(raw, limit)
    clock = (
        gpu.max_sm_clock_mhz
        * clock_ratio
        * np.where(capped, np.cbrt(limit / np.maximum(raw, 1e-9)), 1.0)
    )
    bits |= np.where(capped, CLOCKS_EVENT_SW_POWER_CAP, 0)
    cells = max(1, round(IDLE_AFTER_S / dt_s))
    busy = act.kernel_busy > 1e-6
    tail = None if carry is None else carry.busy_tail
    idle = _idle(busy, cells, tail)
    clock = np.where(idle, gpu.idle_sm_clock_mhz, clock)
    bits |= np.where(idle, CLOCKS_EVENT_GPU_IDLE, 0)
    steady = ambient + gpu.thermal_c_per_w * power
    alpha = 1.0 - np.exp(-dt_s / gpu.thermal_tau_s)
    temp = np.empty_like(steady)
    state = None if carry is None else carry.temperature_state
    ends: list[FloatArray] = []
    for g in range(n_gpus):  # one first-order IIR per GPU row
        zi = (1.0 - alpha) * steady[g, 0] if state is None else float(state[g][0])
        temp[g], zf = _lag(float(alpha), steady[g], zi)
        ends.append(np.array([zf]))
    if carry is not None:
        carry.temperature_state = ends
        carry.busy_tail = (
            np.concatenate([tail, busy], axis=1)[:, -cells:]
            if tail is not None
            else busy[:, -cells:]
        )
        carry.first_cell += n_cells
    return Physics(power, np.round(clock), bits.astype(np.float64), temp)


def wait_power_above_idle_w(
    sc: PhysicsInputs, spin: FloatArray, spin_sm_active_ratio: float
) -> FloatArray:
    """(n_gpus, n_cells) draw above idle of the NCCL receive spin: the energy of a bubble.

    The model's terms for a spin kernel's share of a cell: kernels resident and a few
    SMs busy (spin_sm_active_ratio), at the nominal clock.
    """
    gpu, a = sc.hardware.gpu, sc.activity
    per_w = (gpu.spin_power_w - gpu.idle_power_w) + (
        gpu.peak_power_w - gpu.spin_power_w
    ) * a.power_sm_weight * spin_sm_active_ratio
    out: FloatArray = per_w * spin
    return out


def _lag(alpha: float, x: FloatArray, z: float) -> tuple[FloatArray, float]:
    """The thermal lag y[n] = alpha x[n] + (1 - alpha) y[n-1], state z = (1 - alpha) y[n-1].

    The same floats as scipy's `lfilter([alpha], [1, alpha - 1], x, zi=[z])`: its
    direct form II transposed takes y = z + b0 x, then z = x b1 - y a1 with b1 = 0,
    which is y (1 - alpha) exactly. A plain loop (about 0.1 us a sample) spares
    the simulator scipy's import (75 MB resident, most of the daemon's).
    """
    keep = 1.0 - alpha
    out = []
    for xn in x.tolist():
        y = z + alpha * xn
        z = keep * y
        out.append(y)
    return np.array(out, dtype=np.float64), z


def _idle(
    busy: npt.NDArray[np.bool_], cells: int, tail: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.bool_]:
    """True where no kernel ran in the trailing `cells` cells (this one included).

    `tail`: the cells before these (a part of a longer run), else none before.
    """
    lead = 0 if tail is None else tail.shape[1]
    flags = busy if tail is None else np.concatenate([tail, busy], axis=1)
    c = np.cumsum(flags, axis=1)
    prev = np.zeros_like(c)
    prev[:, cells:] = c[:, :-cells]
    out: npt.NDArray[np.bool_] = ((c - prev) == 0)[:, lead:]
    return out
