"""Hand-built telemetry that follows the pipeline physics of docs/detection.md.

A fine timeline (10 ms cells) says which share of each cell a stage computes;
SM activity, kernel-busy and power follow from it (waiting ranks spin: kernel
busy, SMs ~idle, power above idle); samples are interval means plus noise.
"""

from __future__ import annotations

import numpy as np

from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE, CLOCKS_EVENT_SW_POWER_CAP, Metric
from bubblewatch.model.recording import LoadSeries, Recording, recording_from_arrays
from bubblewatch.model.topology import Topology

CELL_S = 0.01
IDLE_W, SPIN_W, COMPUTE_W = 85.0, 150.0, 520.0
SPIN_SM, COMPUTE_SM, LAUNCH_SM = 0.02, 0.85, 0.22


def busy_timeline(
    mode: str,
    pp: int,
    duration_s: float,
    *,
    k: int = 1,
    weights: list[float] | None = None,
    prefill_every_s: float = 12.0,
    prefill_stage_s: float = 0.4,
    seed: int = 0,
) -> np.ndarray:
    """(pp, cells) share of each cell in which the stage computes."""
    n = round(duration_s / CELL_S)
    t = np.arange(n) * CELL_S
    w = np.ones(pp) if weights is None else np.asarray(weights, dtype=float)
    if mode == "idle":
        return np.zeros((pp, n))
    if mode == "serialized":
        base = np.repeat((w / w.sum())[:, None], n, axis=1) * 0.95  # 5%: CPU gap per token
    else:  # pipelined with k micro-batches: the slowest stage sets the pace
        base = np.repeat((np.minimum(1.0, k / pp) * w / w.max())[:, None], n, axis=1) * 0.97
    rng = np.random.default_rng(seed)
    if mode != "serialized":
        # The batch grows and shrinks over seconds; decode lags (ms) keep stages in phase.
        steps = rng.normal(size=n // 100 + 2).cumsum()
        slow = np.interp(np.arange(n) / 100, np.arange(steps.size), steps)
        slow = (slow - slow.min()) / max(np.ptp(slow), 1e-9)
        base = base * (1.0 - 0.2 * slow)[None, :]
    starts = np.arange(1.0, duration_s - pp * prefill_stage_s, prefill_every_s)
    starts = starts + rng.uniform(0, 1.0, starts.size)
    for t0 in starts:
        for s in range(pp):
            inside = (t >= t0 + s * prefill_stage_s) & (t < t0 + (s + 1) * prefill_stage_s)
            base[s, inside] = 1.0
            if mode == "serialized":
                others = np.arange(pp) != s
                base[np.ix_(others, np.flatnonzero(inside))] = 0.0
    return base


def make_recording(
    mode: str = "serialized",
    pp: int = 4,
    tp: int = 1,
    *,
    duration_s: float = 60.0,
    interval_s: float = 0.5,
    k: int = 1,
    weights: list[float] | None = None,
    launch_bound: bool = False,
    running: float | None = 8.0,
    queued: float | None = 2.0,
    with_sm: bool = True,
    with_kernel_busy: bool = True,
    throttle_gpu: int | None = None,
    noise: float = 0.01,
    seed: int = 0,
    topology: bool = True,
    in_phase: bool = False,
) -> Recording:
    """A recording of `pp` stages x `tp` GPUs sampled every `interval_s`."""
    busy = busy_timeline(mode, pp, duration_s, k=k, weights=weights, seed=seed)
    if in_phase:  # tensor/data parallel: every group computes at once
        busy = np.repeat(busy[:1], pp, axis=0)
    # Prefill cells (busy == 1) run big kernels at full SM activity even with graphs off.
    prefill = busy >= 1.0
    run_sm = np.where(prefill | (not launch_bound), COMPUTE_SM, LAUNCH_SM)
    run_w = np.where(prefill | (not launch_bound), COMPUTE_W, IDLE_W + 0.3 * (COMPUTE_W - IDLE_W))
    if mode == "idle":
        sm, kb, pw = np.zeros_like(busy), np.zeros_like(busy), np.full_like(busy, IDLE_W)
    else:
        sm = busy * run_sm + (1 - busy) * SPIN_SM
        # Launch-bound compute leaves gaps between kernels while the CPU launches the next
        # (10% of its time); spin kernels never stop.
        kernel_share = np.where(prefill | (not launch_bound), 1.0, 0.9)
        kb = busy * kernel_share + (1 - busy)
        pw = busy * run_w + (1 - busy) * SPIN_W
    per = max(1, round(interval_s / CELL_S))
    n = busy.shape[1] // per

    def mean(x: np.ndarray) -> np.ndarray:
        return x[:, : n * per].reshape(x.shape[0], n, per).mean(axis=2)

    rng = np.random.default_rng(seed + 1)
    gpu_rows = np.repeat(np.arange(pp), tp)  # stage of each GPU
    sm_s = np.clip(mean(sm)[gpu_rows] + rng.normal(0, noise, (pp * tp, n)), 0, 1)
    kb_s = np.clip(np.round(mean(kb)[gpu_rows] * 100) / 100, 0, 1)
    pw_s = mean(pw)[gpu_rows] + rng.normal(0, 200 * noise, (pp * tp, n))
    clock = np.full((pp * tp, n), 2400.0)
    # Spinning ranks run a kernel, so only a truly idle engine sets GpuIdle.
    idle_bit = CLOCKS_EVENT_GPU_IDLE if mode == "idle" else 0
    reasons = np.full((pp * tp, n), float(idle_bit))
    if throttle_gpu is not None:
        clock[throttle_gpu] = 1800.0
        reasons[throttle_gpu] = CLOCKS_EVENT_SW_POWER_CAP
    t = 1000.0 + (np.arange(n) + 1) * per * CELL_S
    values: dict[Metric, np.ndarray] = {
        Metric.POWER_INSTANT_W: pw_s,
        Metric.SM_CLOCK_MHZ: clock,
        Metric.CLOCKS_EVENT_REASONS: reasons,
    }
    if with_sm:
        values[Metric.SM_ACTIVE_RATIO] = sm_s
    if with_kernel_busy:
        values[Metric.KERNEL_BUSY_RATIO] = kb_s
    load = None
    if running is not None or queued is not None:
        lt = t[:: max(1, round(1.0 / interval_s))]
        load = LoadSeries(
            lt,
            np.full(lt.size, np.nan if running is None else running),
            np.full(lt.size, np.nan if queued is None else queued),
        )
    topo = Topology.from_sizes(pp, tp, source="test") if topology else None
    return recording_from_arrays(t, values, topology=topo, load=load)
