"""Per-GPU levels learned from the data, and occupancy: the share of time doing useful work.

NCCL receive spin keeps `utilization.gpu` near 100% with SM activity near 0,
so occupancy comes from SM activity (GPM) when present, else from power
between learned idle and compute levels (less certain: spin raises power).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.options import DetectOptions
from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE, Metric
from bubblewatch.model.recording import Recording

FloatArray = npt.NDArray[np.float64]

SIGNAL_SM = "sm_active"
SIGNAL_POWER = "power"


@dataclass(frozen=True)
class Levels:
    """What "idle", "waiting" and "computing" look like on these GPUs in this window."""

    signal: str  # SIGNAL_SM or SIGNAL_POWER
    spin_sm_active: float | None
    compute_sm_active: float | None
    compute_sm_learned: bool
    idle_power_w: FloatArray  # per GPU, NaN when no power
    idle_power_source: tuple[str, ...]  # per GPU: "gpu_idle_samples", "low_percentile", "none"
    compute_power_w: float | None
    spin_power_share: float = 0.0  # waiting draw above idle, as a share of compute minus idle


def power_metric(grid: Grid) -> Metric | None:
    """Instant power where reported (sharper in time), else the 1 s average."""
    for m in (Metric.POWER_INSTANT_W, Metric.POWER_AVG_W):
        arr = grid.get(m)
        if arr is not None and np.isfinite(arr).any():
            return m
    return None


def learn_levels(grid: Grid, recording: Recording, options: DetectOptions) -> Levels:
    """Spin and compute SM levels (pooled), idle power per GPU, compute power (pooled)."""
    sm = grid.get(Metric.SM_ACTIVE_RATIO)
    has_sm = sm is not None and bool(np.isfinite(sm).any())
    spin = compute = None
    learned = False
    if sm is not None and has_sm:
        # Every sample mixes spin with some compute, so a low percentile bounds the spin
        # level from above; in a loaded pipeline no sample is pure spin, so the bound is
        # capped by the assumed spin level (a spin kernel holds a few SMs).
        low = float(np.nanpercentile(sm, options.idle_percentile))
        spin = float(np.clip(low, 0.0, options.spin_sm_active))
        high = float(np.nanpercentile(sm, options.compute_percentile))
        learned = high >= options.min_compute_sm_active
        compute = max(high, options.min_compute_sm_active)
    pm = power_metric(grid)
    idle = np.full(len(grid.gpus), np.nan)
    sources = ["none"] * len(grid.gpus)
    compute_power = None
    if pm is not None:
        power = grid.values[pm]
        if np.isfinite(power).any():
            compute_power = float(np.nanpercentile(power, options.compute_percentile))
            limits = [g.power_limit_w for g in recording.gpus if g.index in grid.gpus]
            known = [w for w in limits if w is not None and w > 0]
            if known:
                floor = options.compute_share_of_power_limit * float(np.median(known))
                compute_power = max(compute_power, floor)
        for k, g in enumerate(grid.gpus):
            idle_k, src = _idle_power(recording, g, pm, options)
            if src == "none" and np.isfinite(power[k]).any() and compute_power is not None:
                # Never flagged idle: the low percentile is the waiting (spin) level, an
                # upper bound; idle draw is a small share of the compute level on any card.
                low = float(np.nanpercentile(power[k], options.idle_percentile))
                cap = options.idle_share_of_compute_power * compute_power
                idle_k, src = (low, "low_percentile") if low <= cap else (cap, "assumed_share")
            idle[k], sources[k] = idle_k, src
    return Levels(
        signal=SIGNAL_SM if has_sm else SIGNAL_POWER,
        spin_sm_active=spin,
        compute_sm_active=compute,
        compute_sm_learned=learned,
        idle_power_w=idle,
        idle_power_source=tuple(sources),
        compute_power_w=compute_power,
        spin_power_share=options.spin_share_of_compute_power,
    )


def _idle_power(
    recording: Recording, gpu: int, metric: Metric, options: DetectOptions
) -> tuple[float, str]:
    """Median power of samples the driver flagged GpuIdle, when there are a few."""
    s = recording.series[gpu]
    reasons, power = s.get(Metric.CLOCKS_EVENT_REASONS), s.get(metric)
    if reasons is None or power is None:
        return float("nan"), "none"
    ok = np.isfinite(reasons) & np.isfinite(power)
    flagged = ok & ((np.where(ok, reasons, 0).astype(np.int64) & CLOCKS_EVENT_GPU_IDLE) != 0)
    if flagged.sum() < 3:
        return float("nan"), "none"
    return float(np.median(power[flagged])), "gpu_idle_samples"


def occupancy(grid: Grid, levels: Levels) -> FloatArray:
    """Per-GPU, per-step share of time spent computing, 0..1 (NaN where unknown)."""
    if levels.signal == SIGNAL_SM:
        sm = grid.values[Metric.SM_ACTIVE_RATIO]
        lo = levels.spin_sm_active or 0.0
        hi = levels.compute_sm_active or 1.0
        return np.asarray(np.clip((sm - lo) / max(hi - lo, 1e-6), 0.0, 1.0), dtype=np.float64)
    pm = power_metric(grid)
    if pm is None or levels.compute_power_w is None:
        return np.full((len(grid.gpus), grid.n_steps), np.nan)
    power = grid.values[pm]
    idle = levels.idle_power_w[:, None]
    # Waiting ranks spin above idle; without SM activity that draw can only be assumed.
    wait = idle + levels.spin_power_share * (levels.compute_power_w - idle)
    span = np.maximum(levels.compute_power_w - wait, 1e-6)
    return np.asarray(np.clip((power - wait) / span, 0.0, 1.0), dtype=np.float64)
