"""Resampling onto a common grid: different instants, uneven intervals, gaps."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect.grid import resample, sampling_interval_s
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording


def _rec(series: dict[int, GpuSeries]) -> Recording:
    return Recording(gpus=tuple(GpuInfo(g) for g in series), series=series)


def test_gpus_sampled_at_different_instants_share_a_grid():
    t0 = np.arange(0, 20, 0.5)
    ramp = {Metric.SM_ACTIVE_RATIO: t0 / 20}
    rec = _rec(
        {
            0: GpuSeries(0, t0, ramp),
            1: GpuSeries(1, t0 + 0.13, {Metric.SM_ACTIVE_RATIO: (t0 + 0.13) / 20}),
        }
    )
    grid = resample(rec, (0, 1), (Metric.SM_ACTIVE_RATIO,), step_s=0.5, max_gap_steps=2.5)
    sm = grid.values[Metric.SM_ACTIVE_RATIO]
    assert grid.t_s[0] == pytest.approx(0.13)
    # Linear signals interpolate exactly: both GPUs read t/20 at every grid instant.
    assert sm[0] == pytest.approx(grid.t_s / 20)
    assert sm[1] == pytest.approx(grid.t_s / 20)


def test_gaps_become_nan_and_absent_metrics_stay_absent():
    t = np.concatenate([np.arange(0, 10, 1.0), np.arange(20, 30, 1.0)])
    rec = _rec({0: GpuSeries(0, t, {Metric.POWER_AVG_W: np.full(t.size, 100.0)})})
    grid = resample(
        rec, (0,), (Metric.POWER_AVG_W, Metric.SM_ACTIVE_RATIO), step_s=1.0, max_gap_steps=2.5
    )
    pw = grid.values[Metric.POWER_AVG_W][0]
    gap = (grid.t_s > 11.5) & (grid.t_s < 17.5)  # over 2.5 steps from any sample
    assert np.isnan(pw[gap]).all()
    assert np.isfinite(pw[~gap]).all()
    assert Metric.SM_ACTIVE_RATIO not in grid.values


def test_interval_is_the_median_of_uneven_steps():
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.8, 1.2, 200))
    rec = _rec({0: GpuSeries(0, t, {Metric.POWER_AVG_W: np.ones(t.size)})})
    assert sampling_interval_s(rec, (0,)) == pytest.approx(1.0, abs=0.05)
