"""Findings about a job, whatever its parallelism: a collective held up, or GPUs underfed.

Both read per-GPU, per-step arrays on the common grid, so they work for data-
and tensor-parallel jobs as well as pipelines.

collective_wait: some GPUs run a kernel all the time (utilization.gpu near
100%) at waiting level (no SM work, spin power) while others run nothing on
the GPU: ranks spin in a collective, waiting for ranks whose host side holds
them (checkpoint writing, data loading, a hang). Measured per time step;
evidence names the holding and waiting GPUs, the share of the window, the
longest run, the run still going at the end of the window (what a hang alert
follows), the energy the waiting GPUs burnt above idle, and each wait as an
event (start, length, energy: every checkpoint stall of a job that saves every
step), one per run of waiting steps; the count is kept whole, the list holds
the longest `cw_max_events` in time order.

underfed: every GPU that takes part runs kernels with gaps between them
(utilization.gpu well under 100%) and uses a small share of its capacity:
input, host or launch bound. Not a pipeline problem (said only when there is
no pipeline evidence).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.levels import SIGNAL_POWER, Levels
from bubblewatch.detect.reductions import median, row_nanmedians
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import Finding, Verdict

FloatArray = npt.NDArray[np.float64]
GIB = 1024.0**3
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class GpuWindow:
    """Per-GPU arrays (n_gpus, n_steps) on the grid, for job-level findings."""

    gpus: tuple[int, ...]
    step_s: float
    occupancy: FloatArray
    kernel_busy: FloatArray | None
    power_w: FloatArray | None
    memory_b: FloatArray | None = None
    start_s: float = 0.0  # time of the first step (seconds since the epoch)


@dataclass(frozen=True)
class WaitEvent:
    """One collective wait: when it started, how long it lasted, the energy burnt waiting."""

    start_s: float
    offset_s: float  # from the window's first step
    duration_s: float
    energy_j: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {
            "start": round(self.start_s, 3),
            "offset_s": round(self.offset_s, 1),
            "duration_s": round(self.duration_s, 1),
            "energy_j": _r(self.energy_j, 1),
        }


MEASURED_IDLE = ("gpu_idle_samples", "no_kernel_samples")


def job_idle_levels(levels: Levels) -> Levels:
    """Levels where a GPU never seen idle takes the idle draw measured on the job's others.

    A rank that spins in every gap between steps never runs no kernel, so its idle draw
    can only be assumed (a share of the compute level), and its spin reads as work; the
    holding rank of the same job, on the same card, shows the real idle draw. Only raised:
    an assumed level above the measured one is kept.
    """
    measured = np.array([s in MEASURED_IDLE for s in levels.idle_power_source], dtype=bool)
    if levels.signal != SIGNAL_POWER or not measured.any() or measured.all():
        return levels
    idle = levels.idle_power_w.copy()
    shared = median(idle[measured])
    idle[~measured] = np.fmax(idle[~measured], shared)
    return replace(levels, idle_power_w=idle)


def memory_in_use_b(w: GpuWindow) -> FloatArray | None:
    """Each GPU's median device memory in use over the window (NaN where never read)."""
    if w.memory_b is None:
        return None
    mem = w.memory_b
    known = np.isfinite(mem).any(axis=1)
    out = np.full(len(w.gpus), np.nan)
    if known.any():
        out[known] = row_nanmedians(mem[known])
    return out


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _runs(mask: BoolArray) -> tuple[int, int]:
    """(longest run of True, run of True at the end) in steps."""
    starts, ends = _run_bounds(mask)
    if starts.size == 0:
        return 0, 0
    lengths = ends - starts
    tail = int(lengths[-1]) if ends[-1] == mask.size else 0
    return int(lengths.max()), tail


def _run_bounds(mask: BoolArray) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Start and end (exclusive) step of each run of True."""
    m = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(m == 1), np.flatnonzero(m == -1)


def wait_events(
    instant: BoolArray, w: GpuWindow, energy_per_step_j: FloatArray | None, most: int
) -> tuple[int, list[WaitEvent]]:
    """The waits as events: (how many, the longest `most` of them in time order)."""
    starts, ends = _run_bounds(instant)
    if starts.size == 0:
        return 0, []
    chosen = np.sort(np.argsort(-(ends - starts), kind="stable")[:most])
    cum = (
        None if energy_per_step_j is None else np.concatenate(([0.0], np.cumsum(energy_per_step_j)))
    )
    events = [
        WaitEvent(
            start_s=w.start_s + float(starts[i]) * w.step_s,
            offset_s=float(starts[i]) * w.step_s,
            duration_s=float(ends[i] - starts[i]) * w.step_s,
            energy_j=None if cum is None else float(cum[ends[i]] - cum[starts[i]]),
        )
        for i in chosen.tolist()
    ]
    return int(starts.size), events


def collective_wait_finding(w: GpuWindow, levels: Levels, options: DetectOptions) -> Finding | None:
    """Waiting GPUs spin while holding GPUs run nothing (see the module docstring)."""
    kb = w.kernel_busy
    if kb is None or len(w.gpus) < 2:
        return None
    occ = np.where(np.isfinite(w.occupancy), w.occupancy, 1.0)
    kbf = np.where(np.isfinite(kb), kb, np.nan)
    # Power is a 1 s average: around a stall's edges it still shows the work before it.
    most = options.cw_max_occupancy_power if levels.signal == SIGNAL_POWER else None
    waiting = (kbf >= options.cw_wait_kernel_busy) & (occ <= (most or options.cw_max_occupancy))
    holding = (kbf <= options.cw_hold_kernel_busy) & (occ <= options.cw_max_occupancy)
    mem = memory_in_use_b(w)
    if mem is not None:
        # A GPU with no model in memory is not part of the job: it holds nothing.
        in_job = ~(np.isfinite(mem) & (mem < options.loaded_memory_gib * GIB))
        holding &= in_job[:, None]
    known = np.isfinite(kbf).all(axis=0)
    instant: BoolArray = np.asarray(
        known & waiting.any(axis=0) & holding.any(axis=0) & (waiting | holding).all(axis=0),
        dtype=bool,
    )
    share = float(instant.mean()) if instant.size else 0.0
    if share < options.cw_min_share:
        return None
    hold_share = (holding & instant).sum(axis=1) / max(int(instant.sum()), 1)
    wait_share = (waiting & instant).sum(axis=1) / max(int(instant.sum()), 1)
    holding_gpus = [w.gpus[k] for k in np.flatnonzero(hold_share >= 0.5).tolist()]
    waiting_gpus = [w.gpus[k] for k in np.flatnonzero(wait_share >= 0.5).tolist()]
    if not holding_gpus or not waiting_gpus:
        return None
    longest, tail = _runs(instant)
    energy = per_step = None
    if w.power_w is not None and np.isfinite(levels.idle_power_w).any():
        above = np.clip(w.power_w - levels.idle_power_w[:, None], 0.0, None)
        rows = [w.gpus.index(g) for g in waiting_gpus]
        per_step = np.nansum(above[rows], axis=0) * w.step_s
        energy = float(np.sum(np.where(instant, per_step, 0.0)))
    n_events, events = wait_events(instant, w, per_step, options.cw_max_events)
    conf = 0.5 + 0.4 * min(1.0, share / options.cw_primary_share)
    if levels.signal == SIGNAL_POWER:
        conf -= 0.05
    return Finding(
        Verdict.COLLECTIVE_WAIT,
        min(conf, 0.95),
        f"GPU(s) {gpu_list(waiting_gpus)} spin in a collective while "
        f"GPU(s) {gpu_list(holding_gpus)} run nothing ({share:.0%} of the window in "
        f"{n_events} wait(s), longest {longest * w.step_s:.0f} s): the job "
        "waits on the host side of the holding GPU(s) (checkpoint, data loading or a hang)",
        {
            "holding_gpus": holding_gpus,
            "waiting_gpus": waiting_gpus,
            "share_ratio": _r(share),
            "longest_s": _r(longest * w.step_s, 1),
            "ongoing_s": _r(tail * w.step_s, 1),
            "energy_j": _r(energy, 1),
            "event_count": n_events,
            "events": [e.to_dict() for e in events],
        },
        gpu=holding_gpus[0],
    )


def underfed_finding(
    w: GpuWindow, gpus: tuple[int, ...], levels: Levels, options: DetectOptions
) -> Finding | None:
    """The GPUs that take part run kernels with gaps, well under capacity (see above)."""
    kb = w.kernel_busy
    if kb is None or not gpus:
        return None
    rows = [w.gpus.index(g) for g in gpus]
    kb_g = np.nanmean(kb[rows], axis=1)
    occ_g = np.nanmean(w.occupancy[rows], axis=1)
    if not (np.isfinite(kb_g).all() and np.isfinite(occ_g).all()):
        return None
    if kb_g.max() > options.uf_max_kernel_busy or occ_g.max() > options.uf_max_occupancy:
        return None
    if kb_g.mean() < options.idle_kernel_busy:
        return None  # nothing runs: idle, not underfed
    mean_kb, mean_occ = float(kb_g.mean()), float(occ_g.mean())
    conf = 0.5 + 0.2 * float(np.clip((options.uf_max_kernel_busy - mean_kb) / 0.5, 0, 1))
    conf += 0.2 * float(np.clip((options.uf_max_occupancy - mean_occ) / 0.4, 0, 1))
    if levels.signal == SIGNAL_POWER:
        conf -= 0.1
    return Finding(
        Verdict.UNDERFED,
        conf,
        f"GPU(s) {gpu_list(list(gpus))} run kernels {mean_kb:.0%} of the time with gaps between "
        f"them and use {mean_occ:.0%} of their capacity: input, host or launch bound (data "
        "loading, CPU work, small kernels), not a pipeline problem",
        {
            "gpus": list(gpus),
            "kernel_busy_ratio": _r(mean_kb),
            "occupancy_ratio": _r(mean_occ),
            "kernel_gap_ratio": _r(1.0 - mean_kb),
        },
    )


def gpu_list(gpus: list[int]) -> str:
    """GPU indices as a message shows them: 0,1,2."""
    return ",".join(str(g) for g in gpus)
