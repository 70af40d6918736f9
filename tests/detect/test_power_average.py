"""What the detector takes NVML's power reading to average over follows the GPU's name.

NVML: nvmlDeviceGetPowerUsage is the mean over the last 1 s on Ampere (except GA100) and
newer, an instant reading on GA100 (A100, A30, A800) and older. The detector used to
average SM activity over 1 s to match it on every GPU, which on an A100 compares a 1 s
mean with an instant and loses the waiting draw.
"""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect.grid import Grid, resample
from bubblewatch.detect.levels import learn_levels, power_average_by_gpu
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.waiting import held_as_power, trailing_mean, waiting_draw_w
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import recording_from_arrays

A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
STEP_S = 0.1
WAITING_W = 60.0


def _turns(n_gpus: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per 0.1 s step, each GPU's busy share (turns of varying length) and its SM activity."""
    rng = np.random.default_rng(seed)
    busy = np.clip(rng.gamma(0.5, 0.3, (n_gpus, n)), 0.0, 1.0)
    return busy, 0.6 * busy


def test_the_average_follows_each_gpus_name() -> None:
    names = [A100, H100, "Tesla V100-SXM2-32GB", "Some Future GPU", ""]
    gpus = [GpuInfo(index=i, name=n) for i, n in enumerate(names)]
    values = {Metric.POWER_AVG_W: np.full((5, 50), 100.0)}
    rec = recording_from_arrays(1e9 + STEP_S * np.arange(50), values, gpus=gpus)
    # Instant on GA100 and older; 1 s on Hopper; a model not known (or no name): 1 s.
    assert power_average_by_gpu(rec, (0, 1, 2, 3, 4)).tolist() == [0.0, 1.0, 0.0, 1.0, 1.0]
    grid = resample(rec, (0, 1, 2, 3, 4), [Metric.POWER_AVG_W], step_s=STEP_S, max_gap_steps=3)
    levels = learn_levels(grid, rec, DetectOptions())
    assert levels.power_average_s_by_gpu is not None
    assert levels.power_average_s_by_gpu.tolist() == [0.0, 1.0, 0.0, 1.0, 1.0]


def test_signals_are_held_as_each_gpus_power_reading() -> None:
    _, sm = _turns(2, 100)
    grid = Grid((0, 1), STEP_S * np.arange(100), STEP_S, {Metric.SM_ACTIVE_RATIO: sm})
    held = held_as_power(sm, grid, Metric.POWER_AVG_W, np.array([1.0, 0.0]))
    np.testing.assert_allclose(held[0], trailing_mean(sm[:1], 10)[0])  # 1 s: ten steps
    np.testing.assert_array_equal(held[1], sm[1])  # instant: the step itself
    # The instant field (186) is instant on every GPU.
    assert held_as_power(sm, grid, Metric.POWER_INSTANT_W, None) is sm


@pytest.mark.parametrize("instant", [True, False])
def test_waiting_draw_matches_the_reading_to_the_gpu(instant: bool) -> None:
    busy, sm = _turns(2, 600)
    rng = np.random.default_rng(1)
    draw = WAITING_W + 400.0 * busy + rng.normal(0.0, 2.0, busy.shape)
    if not instant:  # a 1 s average power reading holds the second before it
        draw = trailing_mean(draw, round(1.0 / STEP_S))
    grid = Grid(
        (0, 1),
        STEP_S * np.arange(600),
        STEP_S,
        {Metric.SM_ACTIVE_RATIO: sm, Metric.POWER_AVG_W: draw},
    )
    right = np.full(2, 0.0 if instant else 1.0)
    got = waiting_draw_w(grid, Metric.POWER_AVG_W, 0.0, right)
    # A low bound, within a few watts of the true waiting draw.
    assert np.all(got <= WAITING_W + 1.0) and np.all(got >= WAITING_W - 5.0)
    if instant:
        # Taking an A100's instant reading for a 1 s mean (as before) loses it entirely.
        wrong = waiting_draw_w(grid, Metric.POWER_AVG_W, 0.0, np.ones(2))
        assert np.all(np.nan_to_num(wrong) < WAITING_W - 20.0)


def test_an_instant_reading_takes_the_energy_counter_for_the_fit() -> None:
    # Polled at 1 s: SM activity is the second's mean, an A100's power reading a snapshot
    # of it (working or waiting), the energy counter's rise the second's mean draw.
    busy, sm = _turns(2, 300, seed=2)
    rng = np.random.default_rng(3)
    snapshot = WAITING_W + 400.0 * (rng.random(busy.shape) < busy)
    energy = np.cumsum(WAITING_W + 400.0 * busy, axis=1)  # J, 1 s steps
    values = {Metric.SM_ACTIVE_RATIO: sm, Metric.POWER_AVG_W: snapshot}
    instant = np.zeros(2)
    alone = waiting_draw_w(
        Grid((0, 1), np.arange(300.0), 1.0, values), Metric.POWER_AVG_W, 0.0, instant
    )
    grid = Grid((0, 1), np.arange(300.0), 1.0, {**values, Metric.ENERGY_J: energy})
    got = waiting_draw_w(grid, Metric.POWER_AVG_W, 0.0, instant)
    assert np.all(got <= WAITING_W + 1.0) and np.all(got >= WAITING_W - 5.0)
    assert np.all(np.nan_to_num(alone) < got - 10.0)  # the snapshots alone resolve far less
    # A 1 s average reading is fitted as before: the energy counter is not read for it.
    ones = np.ones(2)
    base = Grid((0, 1), np.arange(300.0), 1.0, values)
    np.testing.assert_array_equal(
        waiting_draw_w(grid, Metric.POWER_AVG_W, 0.0, ones),
        waiting_draw_w(base, Metric.POWER_AVG_W, 0.0, ones),
    )
