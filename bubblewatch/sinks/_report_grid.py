"""The numbers behind the report's picture: activity per GPU, binned to the page width.

Pure numpy on a Recording: which GPUs form each stage, a 0..1 activity per
GPU (SM activity, else power scaled to its range, else kernel busy), the mean
of each bin, and the stage x bin matrix the timeline draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology

FloatArray = npt.NDArray[np.float64]
POWER = (Metric.POWER_INSTANT_W, Metric.POWER_AVG_W)


def report_stages(recording: Recording, diagnosis: Diagnosis) -> tuple[tuple[int, ...], ...]:
    if diagnosis.stages:
        return tuple(tuple(s.gpus) for s in diagnosis.stages)
    topo: Topology | None = recording.topology
    if topo is not None:
        return topo.stages
    return tuple((g,) for g in recording.gpu_indices)


def _activity(
    recording: Recording, gpu: int, *, kernels_first: bool = False
) -> tuple[FloatArray, FloatArray, str] | None:
    """(t, activity 0..1, what it is) for one GPU: SM activity, else power scaled to its range.

    `kernels_first`: kernel busy before the others (a collective wait: the waiting GPUs
    spin at 100%, the holding GPU runs nothing, while both do no SM work).
    """
    s = recording.series.get(gpu)
    if s is None or len(s) == 0:
        return None
    kb = s.get(Metric.KERNEL_BUSY_RATIO)
    if kernels_first and kb is not None:
        return s.t_s, kb, "kernel busy"
    sm = s.get(Metric.SM_ACTIVE_RATIO)
    if sm is not None:
        return s.t_s, sm, "SM activity"
    for m in POWER:
        p = s.get(m)
        if p is not None:
            lo, hi = np.nanpercentile(p, 2), np.nanpercentile(p, 98)
            return s.t_s, np.clip((p - lo) / max(hi - lo, 1e-9), 0, 1), "power (scaled)"
    if kb is not None:
        return s.t_s, kb, "kernel busy"
    return None


def binned(t: FloatArray, v: FloatArray, edges: FloatArray) -> FloatArray:
    """Mean of v in each [edges[i], edges[i+1]); NaN where a bin holds no value."""
    n = edges.size - 1
    col = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    ok = np.isfinite(v) & (t >= edges[0]) & (t <= edges[-1])
    total = np.bincount(col[ok], weights=v[ok], minlength=n)
    count = np.bincount(col[ok], minlength=n)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def binned_range(t: FloatArray, v: FloatArray, edges: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(min, max) of v in each [edges[i], edges[i+1]); NaN where a bin holds no value."""
    n = edges.size - 1
    col = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    ok = np.isfinite(v) & (t >= edges[0]) & (t <= edges[-1])
    order = np.argsort(col[ok], kind="stable")
    c, x = col[ok][order], v[ok][order]
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    if c.size:
        starts = np.flatnonzero(np.concatenate(([True], np.diff(c) > 0)))
        lo[c[starts]] = np.minimum.reduceat(x, starts)
        hi[c[starts]] = np.maximum.reduceat(x, starts)
    return lo, hi


def heatmap(
    recording: Recording,
    stages: Sequence[Sequence[int]],
    edges: FloatArray,
    *,
    kernels_first: bool = False,
) -> tuple[FloatArray, str]:
    """Stage x bin matrix of mean activity (the GPUs of a stage averaged)."""
    grid = np.full((len(stages), edges.size - 1), np.nan)
    label = "activity"
    for i, gpus in enumerate(stages):
        rows = []
        for g in gpus:
            a = _activity(recording, g, kernels_first=kernels_first)
            if a is not None:
                t, v, label = a
                rows.append(binned(t, v, edges))
        if rows:
            grid[i] = _nanmean_rows(np.vstack(rows))
    return grid, label


def _nanmean_rows(x: FloatArray) -> FloatArray:
    ok = np.isfinite(x)
    n = ok.sum(axis=0)
    s = np.where(ok, x, 0.0).sum(axis=0)
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def native_step_s(recording: Recording) -> float:
    steps = [float(np.median(np.diff(s.t_s))) for s in recording.series.values() if len(s) > 1]
    return float(np.median(steps)) if steps else math.inf
