"""Per-stage activity over time, binned into a few columns, for pictures of the stagger."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.grid import resample, sampling_interval_s
from bubblewatch.detect.levels import learn_levels, occupancy
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StageActivity:
    """`ratio[s, c]`: stage s's mean occupancy in column c (NaN where no data)."""

    start_s: float
    end_s: float
    ratio: FloatArray


def stage_activity(
    recording: Recording,
    stages: tuple[tuple[int, ...], ...],
    columns: int,
    options: DetectOptions | None = None,
) -> StageActivity | None:
    """Occupancy (as the detector measures it) per stage, averaged into `columns` time bins."""
    opts = options or DetectOptions()
    gpus = tuple(g for st in stages for g in st)
    if not gpus or any(len(recording.series.get(g, ())) < 2 for g in gpus) or columns < 1:
        return None
    step = max(sampling_interval_s(recording, gpus), opts.min_step_s)
    metrics = (Metric.SM_ACTIVE_RATIO, Metric.POWER_INSTANT_W, Metric.POWER_AVG_W)
    grid = resample(recording, gpus, metrics, step_s=step, max_gap_steps=opts.max_gap_steps)
    if grid.n_steps < 1:
        return None
    columns = min(columns, grid.n_steps)  # never more columns than samples: no empty cells
    occ = occupancy(grid, learn_levels(grid, recording, opts))
    row = {g: k for k, g in enumerate(gpus)}
    ok = np.isfinite(occ)
    col = np.minimum((np.arange(grid.n_steps) * columns) // grid.n_steps, columns - 1)
    ratio = np.full((len(stages), columns), np.nan)
    for s, st in enumerate(stages):
        rows = [row[g] for g in st]
        vals = np.where(ok[rows], occ[rows], 0.0).sum(axis=0)
        cnt = ok[rows].sum(axis=0)
        num = np.bincount(col, weights=vals, minlength=columns)
        den = np.bincount(col, weights=cnt, minlength=columns)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio[s] = np.where(den > 0, num / np.maximum(den, 1), np.nan)
    return StageActivity(float(grid.t_s[0]), float(grid.t_s[-1] + step), ratio)
