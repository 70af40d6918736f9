"""What every simulated run shares, serving or training: its bounds and what it shows.

The cell length, the check of a run's size, the GPUs' names, the
NVML-visible timeline of the modelled activity (power, clocks, reasons,
temperature) and the per-second truth series.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from bubblewatch.limits import SIM_MAX_GPU_CELLS
from bubblewatch.sim.activity import Activity
from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sim.power import (
    PhysicsCarry,
    PhysicsInputs,
    physics,
    wait_power_above_idle_w,
)
from bubblewatch.sim.timeline import FIELD_INDEX, FIELDS, Timeline, TimelineGpu
from bubblewatch.sim.truth_series import TruthAccumulator, TruthSeries

DEFAULT_DT_S = 0.005


def gpu_uuid(index: int) -> str:
    return f"GPU-00000000-5151-4b1d-8000-{index:012x}"


def build_timeline(
    sc: PhysicsInputs, act: Activity, dt_s: float, carry: PhysicsCarry | None = None
) -> Timeline:
    """The NVML-visible timeline of `act` on `sc`'s GPUs: power, clocks, reasons, temperature.

    With `carry`, `act` is a part of a longer run (see power.PhysicsCarry).
    """
    first = 0 if carry is None else carry.first_cell
    phys = physics(sc, act, dt_s, carry)
    n_gpus, n_cells = act.kernel_busy.shape
    data = np.empty((n_gpus, len(FIELDS), n_cells), dtype=np.float32)
    for name, arr in (
        ("power_w", phys.power_w),
        ("sm_active", act.sm_active),
        ("sm_occupancy", act.sm_occupancy),
        ("tensor_active", act.tensor_active),
        ("kernel_busy", act.kernel_busy),
        ("sm_clock_mhz", phys.sm_clock_mhz),
        ("clocks_event_reasons", phys.clocks_event_reasons),
        ("temperature_c", phys.temperature_c),
        ("pcie_tx_bytes_per_s", act.pcie_tx_bytes_per_s),
        ("pcie_rx_bytes_per_s", act.pcie_rx_bytes_per_s),
    ):
        data[:, FIELD_INDEX[name], :] = arr
    gpu = sc.hardware.gpu
    tl_gpus = tuple(
        TimelineGpu(gpu_uuid(i), gpu.name, gpu.power_limit_w, gpu.idle_power_w)
        for i in range(n_gpus)
    )
    return Timeline(data, dt_s, tl_gpus, first * dt_s)


def check_run(duration_s: float, dt_s: float, n_gpus: int) -> None:
    """ScenarioError unless the run length, cell length and timeline size are usable."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ScenarioError(f"duration must be > 0 seconds, got {duration_s!r}", field="duration_s")
    if not (math.isfinite(dt_s) and 0 < dt_s <= 0.1):
        raise ScenarioError(f"cell length must be in (0, 0.1] s, got {dt_s!r}", field="dt_s")
    cells = n_gpus * (duration_s / dt_s)  # a float: 1e308 s overflows to inf, not an error
    if cells > SIM_MAX_GPU_CELLS:  # docs/daemon.md, Limits
        raise ScenarioError(
            f"{n_gpus} GPUs for {duration_s:g} s is more than {SIM_MAX_GPU_CELLS} timeline "
            f"cells of {dt_s * 1e3:g} ms ({cells:.3g}; a shorter duration, fewer GPUs)",
            field="duration_s",
        )


def truth_series(
    sc: PhysicsInputs,
    act: Activity,
    timeline: Timeline,
    *,
    in_flight: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    spin_sm_active_ratio: float,
) -> TruthSeries:
    """The per-second truth of a whole run (`in_flight`: each replica's step function)."""
    n_gpus, n_cells = act.busy.shape
    acc = TruthAccumulator(n_gpus, n_cells, timeline.dt_s)
    acc.add(
        0,
        busy=act.busy,
        spin=act.spin,
        power_w=timeline.field("power_w"),
        wait_w=wait_power_above_idle_w(sc, act.spin, spin_sm_active_ratio),
    )
    return acc.result(in_flight)
