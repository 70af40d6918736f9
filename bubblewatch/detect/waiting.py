"""A GPU's draw while waiting, from power against SM activity, and the 1 s power average.

A sample's power and SM activity both mix computing with waiting in the same
share, so power is a line in SM activity; its value at the spin level is what
the GPU draws while it waits (idle and spin kernels together), measured rather
than assumed.
"""

from __future__ import annotations

import numpy as np

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.levels import FloatArray
from bubblewatch.model.metrics import Metric

AVG_POWER_S = 1.0  # what nvmlDeviceGetPowerUsage averages over (Ampere and newer)
MIN_FIT_SAMPLES = 20
N_SE = 2.0
MIN_FIT_SPREAD = 0.005  # SM activity spread (5th to 95th percentile) a fit needs


def waiting_draw_w(grid: Grid, pm: Metric, spin_sm: float) -> FloatArray:
    """Per GPU, a low bound of its draw while waiting: power against SM activity, at the
    spin level (NaN where the samples do not resolve it).

    A sample's power and SM activity both mix computing with waiting in the same share,
    so power is a line in SM activity whose value at the spin level is the waiting draw
    (idle and spin kernels together). The line's value less N_SE standard errors (a low
    bound: a noisy fit cannot put the waiting draw past the truth); SM activity is
    averaged as the power reading is (a 1 s average power holds the second before it).
    """
    power, sm = grid.values[pm], grid.values[Metric.SM_ACTIVE_RATIO]
    if pm is Metric.POWER_AVG_W:
        sm = trailing_mean(sm, round(AVG_POWER_S / grid.step_s))
    out = np.full(power.shape[0], np.nan)
    for k in range(power.shape[0]):
        ok = np.isfinite(power[k]) & np.isfinite(sm[k])
        x, y = sm[k, ok], power[k, ok]
        if x.size < MIN_FIT_SAMPLES or np.ptp(np.percentile(x, [5, 95])) < MIN_FIT_SPREAD:
            continue
        slope, icpt = np.polyfit(x, y, 1)
        resid = y - (slope * x + icpt)
        dx = x - x.mean()
        se = float(
            np.sqrt(
                resid @ resid / (x.size - 2) * (1 / x.size + (spin_sm - x.mean()) ** 2 / (dx @ dx))
            )
        )
        out[k] = max(float(slope * spin_sm + icpt) - N_SE * se, 0.0)
    return out


def trailing_mean(x: FloatArray, n: int) -> FloatArray:
    """Each row's mean over its last `n` steps (fewer at the start), NaN counted as 0."""
    if n <= 1:
        return x
    c = np.cumsum(np.nan_to_num(x), axis=1)
    lagged = np.zeros_like(c)
    lagged[:, n:] = c[:, :-n]
    width = np.minimum(np.arange(1, x.shape[1] + 1), n)
    return np.asarray((c - lagged) / width, dtype=np.float64)
