"""A GPU's draw while waiting, from power against SM activity, and what a power reading averages.

A sample's power and SM activity both mix computing with waiting in the same
share, so power is a line in SM activity; its value at the spin level is what
the GPU draws while it waits (idle and spin kernels together), measured rather
than assumed.
"""

from __future__ import annotations

import numpy as np

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.levels import FloatArray
from bubblewatch.model.gpu_models import POWER_READING_AVERAGE_S, POWER_READING_INSTANT_S
from bubblewatch.model.metrics import Metric

MIN_FIT_SAMPLES = 20
N_SE = 2.0
MIN_FIT_SPREAD = 0.005  # SM activity spread (5th to 95th percentile) a fit needs


def waiting_draw_w(
    grid: Grid, pm: Metric, spin_sm: float | FloatArray, average_s: FloatArray | None = None
) -> FloatArray:
    """Per GPU, a low bound of its draw while waiting: power against SM activity, at the
    spin level (`spin_sm`: one, or one per GPU; NaN where the samples do not resolve it).
    `average_s`: per GPU, what its power_avg_w averages over (Levels.power_average_s_by_gpu;
    None: 1 s each).

    A sample's power and SM activity both mix computing with waiting in the same share,
    so power is a line in SM activity whose value at the spin level is the waiting draw
    (idle and spin kernels together); power and SM activity are taken over matching spans
    (power_spanning_sm: a 1 s average power holds the second before it; an A100's reading
    is an instant, for which the energy counter gives the step's mean draw). SM
    activity carries its own error (its span is not quite the power reading's, and noise),
    which flattens the fitted line and lifts it where it is read far below the samples
    (simulated layersplit4 with 1 s power: samples at SM 0.09-0.13, the fit 57-64 W at 0
    against a 55 W idle). The true line lies between power fitted on SM activity and SM
    activity fitted on power (Frisch's bounds), so the lower of the two at the spin level,
    less N_SE standard errors, is the bound.
    """
    power, sm = power_spanning_sm(grid, pm, average_s)
    out = np.full(power.shape[0], np.nan)
    at = np.broadcast_to(np.asarray(spin_sm, dtype=np.float64), out.shape)
    for k in range(power.shape[0]):
        x0 = float(at[k])
        ok = np.isfinite(power[k]) & np.isfinite(sm[k])
        x, y = sm[k, ok], power[k, ok]
        if x.size < MIN_FIT_SAMPLES or np.ptp(np.percentile(x, [5, 95])) < MIN_FIT_SPREAD:
            continue
        slope, icpt, back, back_icpt = _both_lines(x, y)
        if slope <= 0 or back <= 0:
            continue  # no rising line: the samples do not resolve it
        resid = y - (slope * x + icpt)
        dx = x - x.mean()
        se = float(
            np.sqrt(resid @ resid / (x.size - 2) * (1 / x.size + (x0 - x.mean()) ** 2 / (dx @ dx)))
        )
        at_spin = min(float(slope * x0 + icpt), float((x0 - back_icpt) / back))
        out[k] = max(at_spin - N_SE * se, 0.0)
    return out


def _both_lines(x: FloatArray, y: FloatArray) -> tuple[float, float, float, float]:
    """Least-squares lines y on x and x on y: (slope, intercept, back slope, back intercept).

    The closed form on centred samples, what `np.polyfit(x, y, 1)` solves through an SVD
    (the same line to about 1e-12 relative, tests/detect/test_waiting.py; at 64 GPUs x 1 h
    at 10 Hz the two fits per GPU took a sixth of a diagnosis as polyfits).
    """
    mx, my = float(x.mean()), float(y.mean())
    dx, dy = x - mx, y - my
    sxy, sxx, syy = float(dx @ dy), float(dx @ dx), float(dy @ dy)
    if sxx <= 0.0 or syy <= 0.0:
        return 0.0, my, 0.0, mx  # a constant side: no rising line
    slope, back = sxy / sxx, sxy / syy
    return slope, my - slope * mx, back, mx - back * my


def power_spanning_sm(
    grid: Grid, pm: Metric, average_s: FloatArray | None
) -> tuple[FloatArray, FloatArray]:
    """Per GPU, power and SM activity over matching spans, for the waiting draw's fit.

    SM activity is the mean since the previous poll. A 1 s average power reading is
    matched by SM activity held over that second (held_as_power). An instant reading
    (GA100 and older) matches nothing SM activity spans; there the energy counter's rise
    over each step is the mean draw over it, which does (simulated pp8-serialized on
    A100s at 1 s: waiting draw 102-107 W against a 110 W spin, 0 W from the instants).
    """
    power = grid.values[pm]
    sm = held_as_power(grid.values[Metric.SM_ACTIVE_RATIO], grid, pm, average_s)
    energy = grid.get(Metric.ENERGY_J)
    if pm is not Metric.POWER_AVG_W or average_s is None or energy is None:
        return power, sm
    with np.errstate(invalid="ignore"):
        rise = np.diff(energy, axis=1, prepend=np.nan) / grid.step_s
    rise = np.where(rise >= 0, rise, np.nan)  # a counter reset is no reading
    instant = (average_s == POWER_READING_INSTANT_S) & np.isfinite(rise).any(axis=1)
    out = np.where(instant[:, None], rise, power)
    return np.asarray(out, dtype=np.float64), sm


def held_as_power(
    x: FloatArray, grid: Grid, pm: Metric, average_s: FloatArray | None
) -> FloatArray:
    """`x` (n_gpus, n_steps) averaged over what each GPU's power reading `pm` averages:
    NVML's power_avg_w the trailing 1 s on Ampere (except GA100) and newer, nothing on GA100
    and older (an instant, as power_instant_w everywhere); `average_s` per GPU (None: 1 s)."""
    if pm is not Metric.POWER_AVG_W:
        return x
    avg = np.full(x.shape[0], POWER_READING_AVERAGE_S) if average_s is None else average_s
    out = x.copy()
    for n in {round(float(a) / grid.step_s) for a in avg}:
        rows = np.round(avg / grid.step_s) == n
        out[rows] = trailing_mean(x[rows], n)
    return np.asarray(out, dtype=np.float64)


def trailing_mean(x: FloatArray, n: int) -> FloatArray:
    """Each row's mean over its last `n` steps (fewer at the start), NaN counted as 0."""
    if n <= 1:
        return x
    c = np.cumsum(np.nan_to_num(x), axis=1)
    lagged = np.zeros_like(c)
    lagged[:, n:] = c[:, :-n]
    width = np.minimum(np.arange(1, x.shape[1] + 1), n)
    return np.asarray((c - lagged) / width, dtype=np.float64)
