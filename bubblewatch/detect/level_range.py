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

GPUs that take turns (a layer split) within a second defeat power where it
averages over 1 s (Ampere except GA100, and newer): no sample reaches the
compute draw, so the power levels cannot tell a GPU computing 15% of the
time from one at 60%, nor bound it.
There, with power alone, utilization.gpu bounds it: a stage computes only
while a kernel runs, so its busy share is at most its utilisation (which
also counts launch gaps, copies and any waiting kernel: it may read several
times the busy share). The range's top is then the stages' summed
utilisation, whatever power said, and each GPU's occupancy from power is
scaled down where its mean exceeds its mean utilisation
(`busy_at_most_utilization`).
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
from bubblewatch.detect.stats import batch_sigma, stage_mean
from bubblewatch.detect.waiting import N_SE, waiting_draw_w
from bubblewatch.model.metrics import Metric

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
    grid: Grid,
    levels: Levels,
    stages: tuple[tuple[int, ...], ...],
    concurrency: float,
    working_share_of_limit: float = 0.55,
    *,
    turns: bool = False,
) -> LevelRange | None:
    """The range around `concurrency` (the point estimate) that the levels allow; None if none.

    `working_share_of_limit`: a computing GPU draws at least this share of its power limit;
    with power, it caps each GPU's busy share (power_caps). `turns`: the stages take turns
    faster than power resolves (a layer split): with power alone, utilization.gpu is the top.
    """
    ends = _sm_ends(levels) if levels.signal == SIGNAL_SM else _power_ends(grid, levels)
    if ends is None or not stages:
        return None
    high_level, low_level, reason = ends
    lo = _concurrency(occupancy(grid, high_level), grid, stages)
    occ_top = occupancy(grid, low_level)
    hi = _concurrency(occ_top, grid, stages)
    caps, why = busy_caps(grid, levels, working_share_of_limit, _row_means(occ_top))
    if caps is not None:
        capped = _capped_concurrency(occ_top, caps, grid, stages)
        if np.isfinite(capped) and capped < hi - 1e-3:
            hi = capped
            reason += f"; {why}"
    util = grid.get(Metric.KERNEL_BUSY_RATIO)
    if turns and levels.signal != SIGNAL_SM and util is not None and np.isfinite(util).any():
        # nvidia-smi prints whole percents: a mean of them may fall half a point short.
        top = _concurrency(np.clip(util + UTIL_ROUNDING, 0.0, 1.0), grid, stages)
        if np.isfinite(top):
            hi, lo = top, min(lo, top)
            reason += (
                f"; the GPUs take turns faster than power resolves, so utilization.gpu bounds "
                f"it from above: {top:.2f} GPU busy at most (it counts launch gaps and "
                "copies too)"
            )
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    lo, hi = min(lo, concurrency), max(hi, concurrency)
    p = len(stages)
    return LevelRange(lo, hi, 1.0 - hi / p, 1.0 - lo / p, reason)


def busy_at_most_utilization(occ: FloatArray, util: FloatArray | None) -> FloatArray:
    """Each GPU's occupancy row scaled down to a mean of at most its mean utilization.gpu."""
    if util is None or not np.isfinite(util).any():
        return occ
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_occ = np.nanmean(occ, axis=1)
        mean_util = np.nanmean(np.clip(util, 0.0, 1.0), axis=1)
    scale = np.where(
        np.isfinite(mean_util) & (mean_occ > mean_util), mean_util / np.maximum(mean_occ, 1e-9), 1.0
    )
    out: FloatArray = occ * scale[:, None]
    return out


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


def busy_caps(
    grid: Grid, levels: Levels, working_share_of_limit: float, busy_max: FloatArray | None = None
) -> tuple[FloatArray | None, str]:
    """Per GPU, the largest busy share power and utilization.gpu allow (the lower), and in
    words what bound it; (None, "") where neither does. `busy_max`: per GPU, the most the
    SM range already allows (power_caps)."""
    by_power = power_caps(grid, levels, working_share_of_limit, busy_max)
    by_util = utilization_caps(grid, levels)
    found = [c for c in (by_power, by_util) if c is not None]
    if not found:
        return None, ""
    caps = np.fmin(found[0], found[-1])
    ref = levels.power_reference_w
    clauses = []
    if by_power is not None and bool(np.any(caps == by_power)):
        clauses.append(
            "power caps it: each GPU's mean draw above its waiting draw, against a working "
            + (
                "draw of at least its own 75th-percentile sample"
                if ref is None
                else f"draw of at least {working_share_of_limit:.0%} of its {ref:.0f} W limit"
            )
            + f", allows {_share_span(by_power)} of the time computing"
        )
    if by_util is not None and bool(np.any(caps == by_util)):
        clauses.append(
            f"utilization.gpu caps it: kernels ran at most {_share_span(by_util)} of the time "
            "(a GPU computes only while a kernel runs)"
        )
    return caps, "; ".join(clauses)


def _share_span(caps: FloatArray) -> str:
    return f"{float(np.nanmin(caps)):.0%}-{float(np.nanmax(caps)):.0%}"


def utilization_caps(grid: Grid, levels: Levels) -> FloatArray | None:
    """Per GPU, the largest busy share its utilization.gpu allows, where the SM level is
    assumed; None where it is not read.

    A GPU computes only while a kernel runs, so its busy share is at most its kernel-busy
    share: the mean of its utilization.gpu readings, plus N_SE standard errors (each
    reading is one driver period, 1/6-1 s) and half a percent (whole percents). Loose
    where waiting ranks spin in a kernel (they read ~100%), tight where they run none (a
    layer split in one process copies activations between devices).
    """
    util = grid.get(Metric.KERNEL_BUSY_RATIO)
    if util is None or not np.isfinite(util).any() or levels.signal != SIGNAL_SM:
        return None
    caps = np.clip(upper_means(np.clip(util, 0.0, 1.0)) + UTIL_ROUNDING, 0.0, 1.0)
    assumed = np.array([s == LEVEL_ASSUMED for s in levels.compute_level_source], dtype=bool)
    caps = np.where(assumed & np.isfinite(caps), caps, np.nan)
    return None if not bool(np.isfinite(caps).any()) else np.asarray(caps, dtype=np.float64)


def power_caps(
    grid: Grid, levels: Levels, working_share_of_limit: float, busy_max: FloatArray | None = None
) -> FloatArray | None:
    """Per GPU, the largest busy share its mean power allows; None without power.

    Mean draw = waiting draw + busy share x (working draw - waiting draw), so with the
    working draw at least W and the waiting draw at least w, the busy share is at most
    (mean - w) / (W - w). W: `working_share_of_limit` of the power limit, else the GPU's
    own 75th-percentile sample (a sample averages computing with waiting, which draws
    less). w: the waiting draw that power against SM activity shows (_waiting_draw_w),
    else the measured idle (GpuIdle samples, samples with no kernel), else 0 W: an
    assumed idle above the true one would tighten the cap past the truth. The line is read
    at the spin level only for the share of the waiting time in which utilization.gpu
    leaves room for a kernel: a GPU waiting with none resident (a layer split copies its
    activations, no NCCL receive spins) shows SM activity 0 and draws its idle; that share
    is at least (u - b) / (1 - b), u the mean utilization.gpu, b `busy_max` (else 1: none).
    The mean draw is that of NVML's power reading where it is read (the 1 s averages on
    Ampere except GA100 and newer; an instant reading is a 25 ms snapshot: a GPU that takes
    turns reads its working or its waiting draw, and on GA100 and older the power reading
    is one), plus N_SE standard errors of it.
    """
    pm, ref = power_metric(grid), levels.power_reference_w
    if pm is None:
        return None
    avg = grid.get(Metric.POWER_AVG_W)
    mean_pm = Metric.POWER_AVG_W if avg is not None and np.isfinite(avg).any() else pm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_w = upper_means(grid.values[mean_pm])
        seen_w = np.nanpercentile(grid.values[pm], WORKING_SAMPLE_PERCENTILE, axis=1)
    measured = np.array([s in _MEASURED_IDLE for s in levels.idle_power_source], dtype=bool)
    wait = np.where(measured & np.isfinite(levels.idle_power_w), levels.idle_power_w, 0.0)
    if levels.signal == SIGNAL_SM:
        spin = (levels.spin_sm_active or 0.0) * _kernel_share_of_waiting(grid, busy_max)
        avg_s = levels.power_average_s_by_gpu
        wait = np.maximum(wait, np.nan_to_num(waiting_draw_w(grid, mean_pm, spin, avg_s)))
    # Without a limit, the GPU's own samples: each averages computing with waiting.
    working = (
        seen_w if ref is None or ref <= 0 else np.full_like(mean_w, working_share_of_limit * ref)
    )
    wait = np.minimum(wait, mean_w)
    caps = np.clip((mean_w - wait) / np.maximum(working - wait, 1e-6), 0.0, 1.0)
    caps = np.where(working > wait, caps, np.nan)  # waiting above the working floor: no bound
    if levels.signal == SIGNAL_SM and levels.compute_level_source:
        # Where the level was found, its range is narrow already; a cap at the point there
        # only trades the noise of power for that of SM activity.
        assumed = np.array([s == LEVEL_ASSUMED for s in levels.compute_level_source])
        caps = np.where(assumed, caps, np.nan)
    return None if not bool(np.isfinite(caps).any()) else np.asarray(caps, dtype=np.float64)


def _kernel_share_of_waiting(grid: Grid, busy_max: FloatArray | None) -> FloatArray:
    """Per GPU, the least share of its waiting time a kernel can have been resident in."""
    util = grid.get(Metric.KERNEL_BUSY_RATIO)
    if util is None or busy_max is None:
        return np.zeros(len(grid.gpus))
    u, b = _row_means(np.clip(util, 0.0, 1.0)), np.clip(busy_max, 0.0, 1.0)
    share = np.clip((u - b) / np.maximum(1.0 - b, 1e-9), 0.0, 1.0)
    return np.asarray(np.nan_to_num(share), dtype=np.float64)


def _row_means(rows: FloatArray) -> FloatArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmean(rows, axis=1), dtype=np.float64)


def upper_means(rows: FloatArray) -> FloatArray:
    """Each row's mean plus N_SE standard errors of it (batch means: samples correlate)."""
    se = np.array([batch_sigma(r) for r in rows])
    out: FloatArray = _row_means(rows) + N_SE * se
    return out


UTIL_ROUNDING = 0.005
_MEASURED_IDLE = frozenset({"gpu_idle_samples", "no_kernel_samples"})
WORKING_SAMPLE_PERCENTILE = 75.0


def _capped_concurrency(
    occ_gpu: FloatArray, caps: FloatArray, grid: Grid, stages: tuple[tuple[int, ...], ...]
) -> float:
    """As _concurrency, with each GPU's window-mean occupancy held to its cap (NaN: none)."""
    row = {g: k for k, g in enumerate(grid.gpus)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per_gpu = np.nanmean(occ_gpu, axis=1)
        per_gpu = np.where(np.isfinite(caps), np.minimum(per_gpu, caps), per_gpu)
        return float(np.nansum([np.nanmean(per_gpu[[row[g] for g in st]]) for st in stages]))


def _concurrency(occ_gpu: FloatArray, grid: Grid, stages: tuple[tuple[int, ...], ...]) -> float:
    """Sum over stages of the time mean of the stage's mean GPU occupancy (as window_stats)."""
    row = {g: k for k, g in enumerate(grid.gpus)}
    index = [np.array([row[g] for g in st]) for st in stages]
    return float(np.nansum(_row_means(stage_mean(occ_gpu, index))))
