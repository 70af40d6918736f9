"""From the engine's intervals to per-GPU activity on the grid: busy, spin, SM, tensor, PCIe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.sim.grid import cell_means
from bubblewatch.sim.serving import ReplicaTrace, StageTrace
from bubblewatch.sim.spec import Scenario

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Activity:
    """(n_gpus, n_cells) cell means; `busy` is computing (no launch gaps), `spin` NCCL busy-wait."""

    busy: FloatArray
    spin: FloatArray
    kernel_busy: FloatArray
    sm_active: FloatArray
    sm_occupancy: FloatArray
    tensor_active: FloatArray
    pcie_tx_bytes_per_s: FloatArray
    pcie_rx_bytes_per_s: FloatArray


def active_windows(rep: ReplicaTrace, duration_s: float) -> tuple[FloatArray, FloatArray]:
    """(start, end) of the spans in which the replica had running requests."""
    t = np.append(rep.load_t_s, duration_s)
    on = rep.running > 0
    return t[:-1][on], t[1:][on]


def replica_activity(
    sc: Scenario,
    rep: ReplicaTrace,
    *,
    stage_gpus: tuple[tuple[int, ...], ...],
    out: Activity,
    n_cells: int,
    dt_s: float,
    duration_s: float,
    first_cell: int | None = None,
) -> None:
    """Fill the rows of `out` that belong to this replica's GPUs.

    `first_cell`: `out` holds the cells from there on, a part of the run (the
    intervals that reach into it are binned); None, the whole run.
    """
    act, spin_spec = sc.activity, sc.spin
    pcie = sc.hardware.interconnect.kind == "pcie"
    first = first_cell or 0
    span = (first * dt_s, (first + n_cells) * dt_s)
    a0, a1 = active_windows(rep, duration_s)
    if first_cell is not None:
        a0, a1 = _reaching(a0, a1, span, a0, a1)
    active = np.clip(cell_means(a0, a1, 1.0, n_cells, dt_s, first_cell=first), 0.0, 1.0)
    n_stages = len(stage_gpus)
    prev_send: tuple[FloatArray, FloatArray, FloatArray] | None = None
    for s, whole in enumerate(rep.stages):
        st = whole if first_cell is None else _stage_part(whole, span)
        dur = np.maximum(st.end_s - st.start_s, 1e-12)
        fg, fc, fl = st.gpu_s / dur, st.comm_s / dur, st.launch_s / dur
        sm_lvl = np.where(st.prefill, act.prefill_sm_active_ratio, act.decode_sm_active_ratio)
        occ_lvl = np.where(
            st.prefill, act.prefill_sm_occupancy_ratio, act.decode_sm_occupancy_ratio
        )
        ten_lvl = np.where(
            st.prefill, act.prefill_tensor_active_ratio, act.decode_tensor_active_ratio
        )

        def mean(
            w: FloatArray | float, a: FloatArray = st.start_s, b: FloatArray = st.end_s
        ) -> FloatArray:
            return cell_means(a, b, w, n_cells, dt_s, first_cell=first)

        # The stage holds a micro-batch for its whole interval, but computes (kernels of
        # its own work: GEMMs, TP all-reduces) only outside the launch gaps. Busy is the
        # computing share (as in training, where kernel gaps are not busy either): a launch
        # gap is not a pipeline bubble, yet the GPU does no work in it, and the bubble ratio
        # counts every second a stage's GPUs do not compute (docs/detection.md).
        holding = np.clip(mean(1.0), 0.0, 1.0)
        busy = np.clip(mean(fg + fc), 0.0, 1.0)
        spins = spin_spec.enabled and n_stages > 1 and (s > 0 or spin_spec.stage0)
        spin = np.clip(active - holding, 0.0, 1.0) if spins else np.zeros(n_cells)
        kb = mean(fg + fc + fl * act.launch_gap_kernel_busy_ratio) + spin
        sm = (
            mean(fg * sm_lvl + fc * act.comm_sm_active_ratio + fl * act.launch_gap_sm_active_ratio)
            + spin * spin_spec.sm_active_ratio
        )
        occ = mean(fg * occ_lvl + (fc + fl) * spin_spec.sm_occupancy_ratio) + (
            spin * spin_spec.sm_occupancy_ratio
        )
        ten = mean(fg * ten_lvl)
        tx = np.zeros(n_cells)
        rx = np.zeros(n_cells)
        if pcie:
            ar = mean(st.allreduce_bytes / dur)
            tx += ar
            rx += ar
            if st.send_start_s.size:
                sd = np.maximum(st.send_end_s - st.send_start_s, 1e-12)
                tx += cell_means(
                    st.send_start_s, st.send_end_s, st.send_bytes / sd, n_cells, dt_s,
                    first_cell=first,
                )  # fmt: skip
            if prev_send is not None:
                rx += cell_means(
                    prev_send[0], prev_send[1], prev_send[2], n_cells, dt_s, first_cell=first
                )
        if st.send_start_s.size:
            sd = np.maximum(st.send_end_s - st.send_start_s, 1e-12)
            prev_send = (st.send_start_s, st.send_end_s, st.send_bytes / sd)
        else:
            prev_send = None
        for g in stage_gpus[s]:
            out.busy[g] = busy
            out.spin[g] = spin
            out.kernel_busy[g] = np.clip(kb, 0.0, 1.0)
            out.sm_active[g] = np.clip(sm, 0.0, 1.0)
            out.sm_occupancy[g] = np.clip(occ, 0.0, 1.0)
            out.tensor_active[g] = np.clip(ten, 0.0, 1.0)
            out.pcie_tx_bytes_per_s[g] = np.maximum(tx, 0.0)
            out.pcie_rx_bytes_per_s[g] = np.maximum(rx, 0.0)


def _reaching(
    start: FloatArray, end: FloatArray, span: tuple[float, float], *arrays: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], ...]:
    """`arrays` cut to the intervals [start, end) that reach into `span` (time ordered)."""
    if start.size == 0:
        return arrays
    if bool((np.diff(start) >= 0).all()) and bool((np.diff(end) >= 0).all()):
        lo = int(np.searchsorted(end, span[0], side="right"))
        hi = int(np.searchsorted(start, span[1], side="left"))
        return tuple(a[lo:hi] for a in arrays)
    keep = (end > span[0]) & (start < span[1])
    return tuple(a[keep] for a in arrays)


def _stage_part(st: StageTrace, span: tuple[float, float]) -> StageTrace:
    """The stage's compute and send intervals that reach into `span`."""
    run = (st.start_s, st.end_s, st.gpu_s, st.comm_s, st.launch_s, st.prefill, st.allreduce_bytes)
    a, b, g, c, la, pf, ar = _reaching(st.start_s, st.end_s, span, *run)
    s0, s1, sb = _reaching(
        st.send_start_s, st.send_end_s, span, st.send_start_s, st.send_end_s, st.send_bytes
    )
    return StageTrace(a, b, g, c, la, pf, ar, s0, s1, sb)


def empty_activity(n_gpus: int, n_cells: int) -> Activity:
    def z() -> FloatArray:
        return np.zeros((n_gpus, n_cells))

    return Activity(z(), z(), z(), z(), z(), z(), z(), z())
