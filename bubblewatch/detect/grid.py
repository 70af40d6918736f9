"""Resampling: GPUs polled at different, uneven instants onto one common time grid."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.reductions import median
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Grid:
    """Per-GPU metric arrays of shape (n_gpus, n_steps) on a shared time axis.

    A metric no GPU reports is not in `values`; a GPU without it (or a gap in
    its samples) holds NaN there.
    """

    gpus: tuple[int, ...]
    t_s: FloatArray
    step_s: float
    values: dict[Metric, FloatArray]

    @property
    def n_steps(self) -> int:
        return int(self.t_s.shape[0])

    def get(self, metric: Metric) -> FloatArray | None:
        return self.values.get(metric)


def sampling_interval_s(recording: Recording, gpus: Sequence[int]) -> float:
    """Median interval between successive samples over the given GPUs (NaN if unknown)."""
    diffs = [np.diff(recording.series[g].t_s) for g in gpus if g in recording.series]
    pooled = np.concatenate(diffs) if diffs else np.zeros(0)
    pooled = pooled[pooled > 0]
    return median(pooled) if pooled.size else float("nan")


def resample(
    recording: Recording,
    gpus: Sequence[int],
    metrics: Sequence[Metric],
    *,
    step_s: float,
    max_gap_steps: float,
) -> Grid:
    """Linear interpolation of each GPU's samples onto a grid over the common span.

    The grid covers the time every listed GPU was sampled (latest first sample
    to earliest last sample); grid points far from any sample of a GPU are NaN.
    """
    series = [recording.series[g] for g in gpus]
    t0 = max(float(s.t_s[0]) for s in series)
    t1 = min(float(s.t_s[-1]) for s in series)
    n = int(np.floor((t1 - t0) / step_s)) + 1 if t1 > t0 else 0
    t = t0 + step_s * np.arange(max(n, 0), dtype=np.float64)
    return resample_at(recording, gpus, metrics, t, step_s=step_s, max_gap_steps=max_gap_steps)


def resample_at(
    recording: Recording,
    gpus: Sequence[int],
    metrics: Sequence[Metric],
    t: FloatArray,
    *,
    step_s: float,
    max_gap_steps: float,
) -> Grid:
    """Each GPU's samples interpolated at the times `t` (NaN far from any sample, as resample)."""
    series = [recording.series[g] for g in gpus]
    values: dict[Metric, FloatArray] = {}
    # Grid points too far from a GPU's samples, per GPU, when every sample counts: the
    # metrics of one poll share their times, so this is found once, not once per metric.
    far_all: dict[int, npt.NDArray[np.bool_]] = {}
    for m in metrics:
        if not any(s.has(m) for s in series):
            continue
        out = np.full((len(series), t.shape[0]), np.nan)
        for k, s in enumerate(series):
            v = s.values.get(m)
            if v is None:
                continue
            ok = np.isfinite(v)
            n_ok = int(ok.sum())
            if n_ok < 2:
                continue
            if n_ok == ok.shape[0]:
                row = np.interp(t, s.t_s, v)
                if k not in far_all:
                    far_all[k] = _far(s.t_s, t, max_gap_steps * step_s)
                far = far_all[k]
            else:
                ts = s.t_s[ok]
                row = np.interp(t, ts, v[ok])
                far = _far(ts, t, max_gap_steps * step_s)
            row[far] = np.nan  # beyond the gap limit: unknown
            out[k] = row
        values[m] = out
    return Grid(tuple(gpus), t, step_s, values)


def _far(ts: FloatArray, t: FloatArray, limit_s: float) -> npt.NDArray[np.bool_]:
    """Points of `t` farther than `limit_s` from the nearest of the sample times `ts`."""
    j = np.clip(np.searchsorted(ts, t), 1, ts.shape[0] - 1)
    near = np.minimum(np.abs(t - ts[j - 1]), np.abs(ts[j] - t))
    return np.asarray(near > limit_s)
