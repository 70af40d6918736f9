"""Training steps in telemetry: the step period, each stage's busy time per step, the wave order.

A training pipeline repeats one step (forward and backward waves through the
stages, then the optimizer) every 100 ms to seconds, so at NVML's 100 ms
sampling each stage's occupancy is a periodic signal even when one micro-batch
(tens of ms per stage) is not resolved.

**Step period**: phase dispersion minimisation over the stages' occupancy.
For a trial period T every sample gets the phase (t / T mod 1); within
segments of a few periods the samples are binned by phase and the dispersion
is the within-bin variance over the within-segment variance (0: the signal
repeats exactly every T; about 1: no structure at T). Segments keep a drifting
step length (steps vary by a few percent) and a slow trend from blurring the
fold. Any multiple of the period folds as well, so the period is the shortest
trial whose dispersion is within `dispersion_slack` of the best, and a fold
whose profile repeats within itself (k = 2..4 alike parts) gives way to the
shorter period. Periods under 2.5 sampling intervals are not looked for (the
samples cannot tell them from their aliases): a fold that repeats within at a
period that short is no claim at all. A window must hold 4 periods.

**Busy time per step**: a stage's occupancy (share of time doing useful work)
times the period.

**Wave order**: the fundamental Fourier coefficient of each stage's
occupancy at 1/T, from every segment, rotated onto a common phase. In a
fill-and-drain schedule stage s waits s forward-times before its first
forward and finishes s backward-times before stage 0: its idle time moves
from the middle of the step (stage 0, waiting for the first backward) to the
step's ends (the last stage, waiting for the first forward), one stage after
the other, so the stages' coefficients lie along a line in stage order. The
order is read along that line's principal axis, oriented so that stage 0
comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.lag import rank_correlation

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# The period search: periods from MIN_PERIOD_STEPS sampling intervals up to a quarter of the
# window (and MAX_PERIOD_S); coarse trials COARSE_SPACING apart (relative), refined.
MIN_PERIOD_STEPS = 2.5
MIN_PERIODS = 4
MAX_PERIOD_S = 60.0
COARSE_SPACING = 1.0 / 64.0
COARSE_PERIODS_PER_SEGMENT = 4
FINE_PERIODS_PER_SEGMENT = 12
FINE_TRIALS = 41
CANDIDATES = 4
# The period and waves are read from at most this many of the latest samples (10 minutes at
# 10 Hz): the search's arrays are trials x samples, and a long recording's steps are steady.
MAX_SAMPLES = 6000


@dataclass(frozen=True)
class StepOptions:
    """Thresholds of the step analysis (see the module docstring)."""

    # A fold that leaves more than this share of the variance unexplained is no period.
    max_dispersion: float = 0.55
    # Multiples of the period fold as well: the shortest trial within this of the best wins.
    dispersion_slack: float = 0.06
    # A fold that repeats this alike within 1/k of the period (k = 2..4) has the shorter
    # period (exactly periodic samples fold perfectly at every multiple of their period).
    min_self_similarity: float = 0.8
    # ... and the repeating part must swing the occupancy by this much (RMS): a step far
    # shorter than the sampling interval leaves only an attenuated alias of itself in
    # averaged samples (a 0.45 s step polled every 1 s: ~0.03).
    min_amplitude: float = 0.05
    # Wave order: the stages' coefficients must lie along one axis (share of their spread).
    min_wave_collinearity: float = 0.7


@dataclass(frozen=True)
class Period:
    """The step period found, and how well the stages' occupancy repeats at it."""

    period_s: float
    dispersion: float  # within-phase variance share at the period: 0 exact repeat, ~1 none
    n_steps: float  # window length / period
    amplitude: float  # RMS of the repeating part of the stages' occupancy


@dataclass(frozen=True)
class Waves:
    """The order in which the waves pass the stages, and how clearly."""

    order: tuple[int, ...]  # stage indices along the wave, stage 0 first
    position: tuple[float, ...]  # each stage's place along the wave (stage 0 at 0, last at 1)
    collinearity: float  # share of the coefficients' spread along the wave's axis
    rank_correlation: float | None  # Spearman of position vs stage index (p >= 3)


@dataclass(frozen=True)
class Steps:
    """What the telemetry shows of a training pipeline's steps."""

    period: Period | None
    stage_busy_s: tuple[float, ...] | None  # busy seconds per step, per stage
    waves: Waves | None


def measure_steps(
    t_s: FloatArray,
    occupancy: FloatArray,
    step_s: float,
    options: StepOptions | None = None,
) -> Steps:
    """Step period, per-stage busy time per step and wave order of stage occupancy (P, n).

    The busy time is the whole window's mean occupancy times the period; the period and
    waves come from the latest MAX_SAMPLES samples.
    """
    opts = options or StepOptions()
    t, x = t_s[-MAX_SAMPLES:], _centred(np.asarray(occupancy)[:, -MAX_SAMPLES:])
    period = find_period(t, x, step_s, opts)
    if period is None:
        return Steps(None, None, None)
    with np.errstate(invalid="ignore"):
        busy = np.nanmean(occupancy, axis=1) * period.period_s
    waves = wave_order(t, x, period.period_s, opts) if x.shape[0] >= 2 else None
    return Steps(period, tuple(float(b) for b in busy), waves)


def _centred(x: FloatArray) -> FloatArray:
    """Rows with gaps at the row mean, the mean removed (a flat or empty row stays 0)."""
    x = np.array(x, dtype=np.float64, ndmin=2)
    ok = np.isfinite(x)
    n = ok.sum(axis=1)
    mean = np.where(n > 0, np.where(ok, x, 0.0).sum(axis=1) / np.maximum(n, 1), 0.0)
    return np.where(ok, x - mean[:, None], 0.0)


def find_period(
    t_s: FloatArray, x: FloatArray, step_s: float, options: StepOptions | None = None
) -> Period | None:
    """The step period of centred rows `x` (P, n) sampled at `t_s`, or None (see the docstring)."""
    opts = options or StepOptions()
    if x.shape[1] < 3 * MIN_PERIODS or not np.any(x):
        return None
    t = np.asarray(t_s, dtype=np.float64) - float(t_s[0])
    span = float(t[-1])
    lo, hi = MIN_PERIOD_STEPS * step_s, min(span / MIN_PERIODS, MAX_PERIOD_S)
    if hi <= lo:
        return None
    n = int(np.ceil(np.log(hi / lo) / np.log1p(COARSE_SPACING))) + 1
    coarse = np.geomspace(lo, hi, n)
    theta = dispersion(t, x, coarse, step_s, COARSE_PERIODS_PER_SEGMENT)
    refined: list[tuple[float, float]] = []
    for i in _local_minima(theta)[:CANDIDATES]:
        fine = coarse[i] * np.linspace(1 - COARSE_SPACING, 1 + COARSE_SPACING, FINE_TRIALS)
        th = dispersion(t, x, fine, step_s, FINE_PERIODS_PER_SEGMENT)
        k = int(np.nanargmin(th))
        refined.append((float(fine[k]), float(th[k])))
    if not refined:
        return None
    best = min(d for _, d in refined)
    if best > opts.max_dispersion:
        return None
    period, found = min((p, d) for p, d in refined if d <= best + opts.dispersion_slack)
    near = period * np.linspace(1 - COARSE_SPACING, 1 + COARSE_SPACING, 9)
    for k in (4, 3, 2):
        alike = [_repeats_within(t, x, float(p), k, step_s) for p in near]
        if max(alike) < opts.min_self_similarity:
            continue
        if period / k < lo:
            return None  # the step may be shorter than the samples resolve: no claim
        fine = (
            near[int(np.argmax(alike))]
            / k
            * np.linspace(1 - COARSE_SPACING, 1 + COARSE_SPACING, FINE_TRIALS)
        )
        th = dispersion(t, x, fine, step_s, FINE_PERIODS_PER_SEGMENT)
        i = int(np.nanargmin(th))
        period, found = float(fine[i]), float(th[i])
        break
    amplitude = float(np.sqrt(max(1.0 - found, 0.0) * float(np.mean(x * x))))
    if amplitude < opts.min_amplitude:
        return None
    return Period(period, found, span / period, amplitude)


def _repeats_within(t: FloatArray, x: FloatArray, period_s: float, k: int, step_s: float) -> float:
    """How alike the k parts of the fold at `period_s` are (1: it repeats k times within).

    Per segment and row, the phase-binned profile (a multiple of k bins) against itself
    turned by 1/k of the period: 1 - sum of squared differences / twice its variance.
    Exactly periodic samples fold perfectly at every multiple of their period (the
    shortest trial wins only up to `dispersion_slack`); this finds the shorter one.
    """
    span = float(t[-1] - t[0])
    per = max(2, round(1.5 * period_s / step_s / k))
    bins = k * per
    seg_len = min(FINE_PERIODS_PER_SEGMENT * period_s, span + step_s)
    seg = np.floor(t / seg_len).astype(np.int64)
    n_seg = max(int(np.floor((span + step_s) / seg_len)), 1)
    keep = seg < n_seg
    b = np.minimum((np.mod(t / period_s, 1.0) * bins).astype(np.int64), bins - 1)
    key = seg[keep] * bins + b[keep]
    cnt = np.bincount(key, minlength=n_seg * bins).reshape(n_seg, bins)
    seen = cnt > 0
    pair = seen & np.roll(seen, per, axis=1)  # both phases sampled (exact repeats leave gaps)
    if not pair.any():
        return 0.0
    diff = var = 0.0
    for row in x:
        prof = np.bincount(key, row[keep], n_seg * bins).reshape(n_seg, bins) / np.maximum(cnt, 1)
        mean = (prof * seen).sum(axis=1, keepdims=True) / np.maximum(
            seen.sum(axis=1, keepdims=True), 1
        )
        prof = np.where(seen, prof - mean, 0.0)
        diff += float(np.sum(np.where(pair, (prof - np.roll(prof, per, axis=1)) ** 2, 0.0)))
        var += float(np.sum(np.where(pair, prof**2, 0.0)))
    return 1.0 - diff / (2.0 * var) if var > 0 else 0.0


def _local_minima(theta: FloatArray) -> list[int]:
    """Indices of local minima of `theta`, lowest first (NaN never a minimum)."""
    th = np.where(np.isfinite(theta), theta, np.inf)
    left = np.concatenate([[np.inf], th[:-1]])
    right = np.concatenate([th[1:], [np.inf]])
    idx = np.flatnonzero((th <= left) & (th <= right) & np.isfinite(th))
    return [int(i) for i in idx[np.argsort(th[idx], kind="stable")]]


def dispersion(
    t: FloatArray, x: FloatArray, periods_s: FloatArray, step_s: float, per_segment: int
) -> FloatArray:
    """Phase dispersion of rows `x` at each trial period (NaN where no segment fits).

    Per trial: segments of `per_segment` periods (the whole span if shorter),
    phase bins of about 1.5 samples per bin per period (4 to 12, at least 5
    samples a bin per segment); within-bin over within-segment sum of squares,
    summed over rows.
    """
    span = float(t[-1] - t[0]) if t.size else 0.0
    periods = np.asarray(periods_s, dtype=np.float64)
    seg_len = np.minimum(per_segment * periods, span + step_s)
    n_seg = np.maximum(np.floor((span + step_s) / seg_len), 1).astype(np.int64)
    per_seg_samples = seg_len / step_s
    bins = np.clip(np.round(1.5 * periods / step_s), 4, 12)
    bins = np.minimum(bins, np.maximum(np.floor(per_seg_samples / 5), 2)).astype(np.int64)
    seg = np.floor(t[None, :] / seg_len[:, None]).astype(np.int64)  # (C, n)
    keep = seg < n_seg[:, None]
    phase = np.mod(t[None, :] / periods[:, None], 1.0)
    b = np.minimum((phase * bins[:, None]).astype(np.int64), bins[:, None] - 1)
    n_bins_max = int(bins.max())
    n_seg_max = int(n_seg.max())
    cand = np.arange(periods.size)[:, None]
    seg_key = np.where(keep, cand * n_seg_max + seg, -1)
    bin_key = np.where(keep, seg_key * n_bins_max + b, -1)
    size_seg = periods.size * n_seg_max
    size_bin = size_seg * n_bins_max
    ks, kb = seg_key[keep], bin_key[keep]
    kc = np.broadcast_to(cand, keep.shape)[keep]
    cnt_seg = np.maximum(np.bincount(ks, minlength=size_seg), 1)
    cnt_bin = np.maximum(np.bincount(kb, minlength=size_bin), 1)
    within = np.zeros(periods.size)
    total = np.zeros(periods.size)
    for row in x:
        v = np.broadcast_to(row, keep.shape)[keep]
        squares = np.bincount(kc, v * v, periods.size)
        # what the segment means (or the phase-bin means within segments) explain
        seg_means = np.bincount(ks, v, size_seg) ** 2 / cnt_seg
        bin_means = np.bincount(kb, v, size_bin) ** 2 / cnt_bin
        total += squares - seg_means.reshape(periods.size, -1).sum(axis=1)
        within += squares - bin_means.reshape(periods.size, -1).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = within / total
    return np.where(total > 0, out, np.nan)


def wave_order(
    t_s: FloatArray, x: FloatArray, period_s: float, options: StepOptions | None = None
) -> Waves | None:
    """The stages' order along the step's waves (see the module docstring), or None."""
    opts = options or StepOptions()
    p = x.shape[0]
    t = np.asarray(t_s, dtype=np.float64) - float(t_s[0])
    span = float(t[-1])
    seg_len = min(FINE_PERIODS_PER_SEGMENT * period_s, span + 1e-9)
    seg = np.floor(t / seg_len).astype(np.int64)
    n_seg = max(int(np.floor(span / seg_len + 1e-9)), 1)
    keep = seg < n_seg
    z = np.exp(-2j * np.pi * t / period_s)
    # coef[k, s]: segment k's fundamental coefficient of stage s
    k = seg[keep]

    def per_segment(w: FloatArray) -> FloatArray:
        return np.asarray(np.bincount(k, w[keep], n_seg), dtype=np.float64)

    coef = np.stack(
        [per_segment(x[s] * z.real) + 1j * per_segment(x[s] * z.imag) for s in range(p)], axis=1
    )
    ref = coef[int(np.argmax(np.abs(coef).sum(axis=1)))]
    turn = np.angle((coef * np.conj(ref)[None, :]).sum(axis=1))
    c = (coef * np.exp(-1j * turn)[:, None]).sum(axis=0)
    pts = np.stack([c.real, c.imag], axis=1)
    pts = pts - pts.mean(axis=0)
    spread = pts.T @ pts
    w, vec = np.linalg.eigh(spread)
    if w.sum() <= 0:
        return None
    collinearity = float(w[-1] / w.sum())
    if collinearity < opts.min_wave_collinearity:
        return None
    q = pts @ vec[:, -1]
    if q[-1] < q[0]:
        q = -q
    rng = float(q.max() - q.min())
    pos = (q - q[0]) / (q[-1] - q[0]) if q[-1] != q[0] else (q - q.min()) / max(rng, 1e-12)
    order = tuple(int(i) for i in np.argsort(q, kind="stable"))
    rho: float | None = None
    if p >= 3:
        rho = rank_correlation(q, np.arange(p, dtype=np.float64))
    return Waves(order, tuple(float(v) for v in pos), collinearity, rho)
