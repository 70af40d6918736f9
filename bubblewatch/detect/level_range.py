"""The concurrency and bubble ranges that the compute level leaves open, and why.

Occupancy is a sample's SM activity between the spin and compute levels
(levels.occupancy). A sample averages computing at the level with waiting
below it, so a GPU's compute level is at least its highest sample and at most
1 (every SM busy): those are physical bounds, whatever the workload. Where no
GPU of the job reached `min_compute_sm_active` and none showed a plateau, the
level is assumed and these bounds are the range (a stage half busy at 1 s
sampling never shows a sample at its level). Where the level was learned, its
stated uncertainty (levels.LEVEL_UNCERTAINTY) within those bounds. With power
alone, the same bounds on the compute power (the highest sample, the power
limit) and the waiting draw between idle and twice its assumed share.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.levels import (
    LEVEL_ASSUMED,
    LEVEL_UNCERTAINTY,
    POWER_LEVEL_UNCERTAINTY,
    SIGNAL_SM,
    FloatArray,
    Levels,
    occupancy,
    power_metric,
)

# The evidence keys this module fills (beyond the rules' contract, detect.types.EVIDENCE_KEYS).
RANGE_KEYS = (
    "concurrency_low",
    "concurrency_high",
    "bubble_ratio_low",
    "bubble_ratio_high",
    "bubble_range_reason",
)


@dataclass(frozen=True)
class LevelRange:
    """Concurrency and bubble at the two ends of the compute level's range."""

    concurrency_low: float
    concurrency_high: float
    bubble_low: float
    bubble_high: float
    reason: str


def level_range(
    grid: Grid, levels: Levels, stages: tuple[tuple[int, ...], ...], concurrency: float
) -> LevelRange | None:
    """The range around `concurrency` (the point estimate) that the levels allow; None if none."""
    ends = _sm_ends(levels) if levels.signal == SIGNAL_SM else _power_ends(grid, levels)
    if ends is None or not stages:
        return None
    high_level, low_level, reason = ends
    lo = _concurrency(occupancy(grid, high_level), grid, stages)
    hi = _concurrency(occupancy(grid, low_level), grid, stages)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    lo, hi = min(lo, concurrency), max(hi, concurrency)
    p = len(stages)
    return LevelRange(lo, hi, 1.0 - hi / p, 1.0 - lo / p, reason)


def _sm_ends(levels: Levels) -> tuple[Levels, Levels, str] | None:
    """Levels at the top and at the bottom of each GPU's compute-level range, and why."""
    mid, tops = levels.compute_sm_by_gpu, levels.top_sm_by_gpu
    if mid is None or tops is None:
        return None
    sources = levels.compute_level_source
    top = np.where(np.isfinite(tops), tops, mid)
    u = np.array([LEVEL_UNCERTAINTY[s] for s in sources])
    assumed = np.array([s == LEVEL_ASSUMED for s in sources])
    low = np.where(assumed, top, np.maximum(top, mid * (1.0 - u)))
    high = np.where(assumed, 1.0, np.minimum(1.0, mid * (1.0 + u)))
    low, high = np.minimum(low, mid), np.maximum(high, mid)
    if bool(assumed.any()):
        reason = (
            f"compute level not seen (no GPU's SM activity reached its working level): "
            f"between the highest sample ({float(np.min(top)):.2f}-{float(np.max(top)):.2f}) "
            "and 1"
        )
    else:
        kinds = "/".join(sorted(set(sources)))
        reason = (
            f"compute level {kinds}, uncertain by up to {float(np.max(u)):.0%} "
            "(at least the highest sample, at most 1)"
        )
    return replace(levels, compute_sm_by_gpu=high), replace(levels, compute_sm_by_gpu=low), reason


def _power_ends(grid: Grid, levels: Levels) -> tuple[Levels, Levels, str] | None:
    """Compute power and waiting draw at the ends of their range (power alone), and why.

    The compute power is at least the highest sample and at most the power limit (else
    POWER_LEVEL_UNCERTAINTY above the estimate); the waiting draw between idle and twice
    the assumed spin share.
    """
    cp, pm = levels.compute_power_w, power_metric(grid)
    if cp is None or pm is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        top = float(np.nanmax(grid.values[pm]))
    cap = levels.power_reference_w
    low = min(cp, top)
    high = max(cp, cp * (1.0 + POWER_LEVEL_UNCERTAINTY) if cap is None else cap)
    spin = levels.spin_power_share
    reason = (
        f"power alone: the compute power level is between the highest sample ({low:.0f} W) "
        + ("and the limit" if cap is not None else "and 25% above the estimate")
        + f" ({high:.0f} W), waiting draws 0-{2 * spin:.0%} of it above idle"
    )
    return (
        replace(levels, compute_power_w=high, spin_power_share=2.0 * spin),
        replace(levels, compute_power_w=low, spin_power_share=0.0),
        reason,
    )


def _concurrency(occ_gpu: FloatArray, grid: Grid, stages: tuple[tuple[int, ...], ...]) -> float:
    """Sum over stages of the time mean of the stage's mean GPU occupancy (as window_stats)."""
    row = {g: k for k, g in enumerate(grid.gpus)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per = [np.nanmean(np.nanmean(occ_gpu[[row[g] for g in st]], axis=0)) for st in stages]
        return float(np.nansum(per))
