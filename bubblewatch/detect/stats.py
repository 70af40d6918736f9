"""Window statistics per stage: occupancy, concurrency, spin, lag, imbalance, bubble energy.

Everything is a whole-array computation over the common grid; the loops run
over stages or GPUs, never over samples.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.health import GpuHealth
from bubblewatch.detect.lag import LagMatrix, LagMemo, fluctuations, positions_from_lags
from bubblewatch.detect.lag import rank_correlation as _rank_correlation
from bubblewatch.detect.levels import SIGNAL_SM, Levels, power_metric
from bubblewatch.detect.reductions import nanmedian, row_nanmedians
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.waiting import held_as_power
from bubblewatch.model.metrics import Metric

FloatArray = npt.NDArray[np.float64]
# A sample counts as pure NCCL spin when kernels ran without work for this share of it.
SPIN_SAMPLE_SHARE = 0.9
MIN_SPIN_SAMPLES = 5


@dataclass(frozen=True)
class WindowStats:
    """The numbers the verdicts are decided from (arrays are per stage unless named per GPU)."""

    stages: tuple[tuple[int, ...], ...]
    step_s: float
    duration_s: float
    occupancy: FloatArray  # (P,) window mean
    occupancy_t: FloatArray  # (P, T)
    sm_active: FloatArray | None
    kernel_busy: FloatArray | None
    power_w: FloatArray | None
    idle_power_w: FloatArray  # (P,) mean over the stage's GPUs
    spin: FloatArray | None  # (P,) share of time kernels ran while SMs stayed idle
    bubble_energy_j: FloatArray | None  # (P,)
    tp_disagreement: FloatArray  # (P,) largest |GPU occupancy - stage occupancy|
    lag_s: FloatArray  # (P,) vs stage 0, NaN where unmeasurable
    lag_rank_correlation: float | None
    lag_pairs_significant: float  # share of adjacent stage pairs with a measurable lag
    stage_zero_lag_correlation: float | None  # mean over stage pairs
    concurrency: float
    concurrency_p90: float
    concurrency_median: float
    launch_bound_index: float | None
    kernel_gap_ratio: float | None  # mean share of time no kernel runs (launch gaps)
    power_fraction: float | None  # mean stage power between idle (0) and compute (1)
    imbalance_ratio: float
    imbalanced_stage: int
    imbalance_consistency: float  # share of time chunks where that stage is busiest
    health: tuple[GpuHealth, ...]
    concurrency_sigma_time: float = 0.0  # standard error of concurrency from its time variation
    working_level: FloatArray | None = None  # (P,) stage occupancy while it works (1: unresolved)
    # The busiest GPU's window-mean kernel-busy ratio; None unless every GPU reports it.
    kernel_busy_top_gpu: float | None = None

    @property
    def pp_size(self) -> int:
        return len(self.stages)

    @property
    def bubble_ratio(self) -> float:
        return 1.0 - self.concurrency / self.pp_size


def stage_mean(per_gpu: FloatArray, index: list[FloatArray]) -> FloatArray:
    """(P, T) mean over each stage's GPU rows, NaN-aware.

    A stage of one GPU is its row (plus 0.0, which makes a -0.0 the 0.0 that
    nanmean gives, and changes nothing else).
    """
    with _quiet():
        return np.stack(
            [
                per_gpu[rows[0]] + 0.0 if len(rows) == 1 else np.nanmean(per_gpu[rows], axis=0)
                for rows in index
            ]
        )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence numpy's all-NaN slice warning where NaN is the intended answer."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _nanmean(x: FloatArray, axis: int | None = None) -> FloatArray:
    with _quiet():
        return np.asarray(np.nanmean(x, axis=axis), dtype=np.float64)


def window_stats(
    grid: Grid,
    levels: Levels,
    *,
    occ_gpu: FloatArray,
    stages: tuple[tuple[int, ...], ...],
    health: tuple[GpuHealth, ...],
    options: DetectOptions,
    lags: LagMemo | None = None,
) -> WindowStats:
    """Per-stage statistics over the window from per-GPU occupancy and raw metrics.

    `lags`: the lags topology inference found in this window, reused where the
    stages' signals are the same rows.
    """
    row = {g: k for k, g in enumerate(grid.gpus)}
    index = [np.array([row[g] for g in st]) for st in stages]
    p = len(stages)
    occ_t = stage_mean(occ_gpu, index)
    occ = _nanmean(occ_t, axis=1)
    gpu_occ = _nanmean(occ_gpu, axis=1)
    disagree = np.array(
        [float(np.nanmax(np.abs(gpu_occ[ix] - occ[s]))) for s, ix in enumerate(index)]
    )

    def stage_avg(m: Metric | None) -> FloatArray | None:
        arr = grid.get(m) if m is not None else None
        if arr is None or not np.isfinite(arr).any():
            return None
        return _nanmean(stage_mean(arr, index), axis=1)

    sm = stage_avg(Metric.SM_ACTIVE_RATIO)
    kb = stage_avg(Metric.KERNEL_BUSY_RATIO)
    pm = power_metric(grid)
    power = stage_avg(pm)
    idle = np.array([float(_nanmean(levels.idle_power_w[ix])) for ix in index])

    spin = None
    kb_grid = grid.get(Metric.KERNEL_BUSY_RATIO)
    if kb_grid is not None and np.isfinite(kb_grid).any() and levels.signal == SIGNAL_SM:
        spin = _nanmean(stage_mean(np.clip(kb_grid - occ_gpu, 0.0, 1.0), index), axis=1)

    energy = _bubble_energy(grid, levels, occ_gpu, pm, index)

    conc_t = np.nansum(occ_t, axis=0)
    conc = float(np.nansum(occ))
    conc_p90 = float(np.nanpercentile(conc_t, 90)) if conc_t.size else float("nan")
    conc_median = nanmedian(conc_t) if conc_t.size else float("nan")

    memo = lags if lags is not None else LagMemo()
    lag_s, rho, sig_share, zero_corr = _lags(occ_t, grid.step_s, options, memo)

    lbi = None
    if kb is not None and levels.signal == SIGNAL_SM:
        # Medians over time: the decode baseline, not the prefill waves (big kernels).
        if conc <= options.serialized_concurrency:
            # One stage holds the pipeline at a time: SM work short of one full stage
            # while kernels keep running is launch overhead.
            lbi = float(np.clip(1.0 - conc_median, 0.0, 1.0)) if float(np.mean(kb)) > 0.5 else 0.0
        else:
            typical = row_nanmedians(occ_t)
            lbi = float(np.mean(np.clip(kb - typical, 0.0, 1.0) / np.maximum(kb, 1e-6)))
    pfrac = None
    if power is not None and levels.compute_power_w is not None:
        span = np.maximum(levels.compute_power_w - idle, 1e-6)
        pfrac = float(np.clip(np.mean((power - idle) / span), 0.0, 1.0))

    mean_occ = float(np.mean(occ)) if p else 0.0
    busiest = int(np.argmax(occ)) if p else 0
    ratio = float(occ[busiest] / mean_occ) if mean_occ > 0 else 1.0
    consistency = _consistency(occ_t, busiest)

    return WindowStats(
        stages=stages,
        step_s=grid.step_s,
        duration_s=float(grid.t_s[-1] - grid.t_s[0]) + grid.step_s if grid.n_steps else 0.0,
        occupancy=occ,
        occupancy_t=occ_t,
        sm_active=sm,
        kernel_busy=kb,
        power_w=power,
        idle_power_w=idle,
        spin=spin,
        bubble_energy_j=energy,
        tp_disagreement=disagree,
        lag_s=lag_s,
        lag_rank_correlation=rho,
        lag_pairs_significant=sig_share,
        stage_zero_lag_correlation=zero_corr,
        concurrency=conc,
        concurrency_p90=conc_p90,
        concurrency_median=conc_median,
        launch_bound_index=lbi,
        kernel_gap_ratio=None if kb is None else float(np.mean(1.0 - kb)),
        power_fraction=pfrac,
        imbalance_ratio=ratio,
        imbalanced_stage=busiest,
        imbalance_consistency=consistency,
        health=health,
        concurrency_sigma_time=batch_sigma(conc_t),
        working_level=np.array([_working_level(row) for row in occ_t]),
        kernel_busy_top_gpu=_kernel_busy_top_gpu(kb_grid),
    )


def _kernel_busy_top_gpu(kb: FloatArray | None) -> float | None:
    """The highest per-GPU window mean of the kernel-busy ratio, when every GPU reports one."""
    if kb is None or not bool(np.isfinite(kb).any(axis=1).all()):
        return None
    return float(np.max(_nanmean(kb, axis=1)))


def _bubble_energy(
    grid: Grid, levels: Levels, occ_gpu: FloatArray, pm: Metric | None, index: list[FloatArray]
) -> FloatArray | None:
    """Per stage, the energy above idle spent while not doing useful work (J).

    With the kernel-busy ratio, the waiting time that kernels ran is NCCL spin,
    which draws the GPU's own spin level, measured on its pure-spin samples,
    else `spin_power_share` of the way from idle to compute power (the level
    power-only occupancy assumes); waiting with no kernel draws idle.
    This holds whatever the working draw: a power-capped or lightly loaded stage
    draws less than the pooled compute level while it works, which made the
    residual below negative (0 J at a 34% bubble). Without the kernel-busy ratio,
    the residual: power above idle that work at the compute level does not explain.
    """
    if pm is None or levels.compute_power_w is None:
        return None
    pw = grid.values[pm]
    idle_g = levels.idle_power_w[:, None]
    kb = grid.get(Metric.KERNEL_BUSY_RATIO)
    if kb is not None and np.isfinite(kb).any():
        spin_t = np.clip(kb - occ_gpu, 0.0, 1.0)
        spin_w = levels.spin_power_share * np.clip(levels.compute_power_w - idle_g, 0.0, None)
        spin_w = np.where(np.isnan(spin_w), 0.0, spin_w)[:, 0]
        # A 1 s average power reading holds the second before it: the spin must hold as long
        # (an instant reading, GA100 and older, only the step).
        held = held_as_power(spin_t, grid, pm, levels.power_average_s_by_gpu)
        for k in range(pw.shape[0]):
            # Where the GPU's own samples show it spinning nearly all the step, its spin
            # draw is measured, not assumed.
            pure = (held[k] >= SPIN_SAMPLE_SHARE) & np.isfinite(pw[k])
            if pure.sum() >= MIN_SPIN_SAMPLES:
                spin_w[k] = max(float(np.percentile(pw[k, pure], 25)) - float(idle_g[k, 0]), 0.0)
        spin_w = spin_w[:, None]
        per_gpu_j = np.nansum(spin_t * spin_w, axis=1) * grid.step_s
    elif levels.signal == SIGNAL_SM:
        # Summed before clipping, so measurement noise around idle cancels out.
        waste_w = pw - idle_g - occ_gpu * (levels.compute_power_w - idle_g)
        per_gpu_j = np.clip(np.nansum(waste_w, axis=1) * grid.step_s, 0.0, None)
    else:
        return None
    return np.array([float(per_gpu_j[ix].sum()) for ix in index])


def batch_sigma(x: FloatArray, n_batches: int = 10) -> float:
    """Standard error of the mean of an autocorrelated series, by batch means."""
    x = x[np.isfinite(x)]
    if x.size < 2 * n_batches:
        return float(np.std(x) / np.sqrt(max(x.size, 1))) if x.size else 0.0
    means = np.array([b.mean() for b in np.array_split(x, n_batches)])
    return float(np.std(means, ddof=1) / np.sqrt(n_batches))


def _working_level(row: FloatArray) -> float:
    """A stage's occupancy while it works, when the samples resolve working from waiting.

    Samples at or above half the stage's 95th percentile count as working; when
    they are most of the window (or too few), the sampling does not resolve the
    stage's turns and the level is taken as 1 (occupancy is already relative to
    the compute level).
    """
    x = row[np.isfinite(row)]
    if x.size < 10:
        return 1.0
    top = float(np.percentile(x, 95))
    if top <= 0.05:
        return 1.0
    working = x >= 0.5 * top
    if working.mean() > 0.7 or working.sum() < 5:
        return 1.0
    return float(np.clip(x[working].mean(), 0.2, 1.0))


def _lags(
    occ_t: FloatArray, step_s: float, options: DetectOptions, memo: LagMemo
) -> tuple[FloatArray, float | None, float, float | None]:
    """Lag of each stage vs stage 0, Spearman rho of lag vs order, share of measurable pairs."""
    p = occ_t.shape[0]
    if p < 2:
        return np.zeros(p), None, 0.0, None
    fl = fluctuations(occ_t, step_s, options.trend_window_s)
    lm: LagMatrix = memo.pairwise_lags(fl, step_s, options.max_lag_s, options.min_lag_correlation)
    pos = positions_from_lags(lm)
    if np.isfinite(pos[0]):
        pos = pos - pos[0]
    adjacent = np.isfinite(lm.lag_s[np.arange(p - 1), np.arange(1, p)])
    rho = _rank_correlation(pos, np.arange(p, dtype=np.float64))
    iu = np.triu_indices(p, 1)
    zero = float(np.mean(lm.zero[iu]))
    return pos, rho, float(adjacent.mean()), zero


def _consistency(occ_t: FloatArray, stage: int) -> float:
    """Share of (up to 8) time chunks in which `stage` is the busiest."""
    t = occ_t.shape[1]
    n = int(min(8, max(1, t // 10)))
    chunks = np.array_split(np.where(np.isfinite(occ_t), occ_t, 0.0), n, axis=1)
    winners = np.array([int(np.argmax(c.mean(axis=1))) for c in chunks])
    return float(np.mean(winners == stage))
