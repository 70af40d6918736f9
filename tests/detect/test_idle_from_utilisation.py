"""Idle from utilisation: no kernel on any GPU is idle whatever the power, limit or not."""

from __future__ import annotations

import numpy as np

from bubblewatch.detect import Verdict, diagnose
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import recording_from_arrays


def _power_util(power_w: np.ndarray, util: np.ndarray, sm: np.ndarray | None = None):
    t = 1.75e9 + np.arange(power_w.shape[1]) * 1.0
    values = {Metric.POWER_AVG_W: power_w, Metric.KERNEL_BUSY_RATIO: util}
    if sm is not None:
        values[Metric.SM_ACTIVE_RATIO] = sm
    return recording_from_arrays(t, values)  # GPUs with no name and no power limit


def test_zero_utilisation_at_flat_power_is_idle() -> None:
    # Regression: 8 cards holding a model at ~120 W, utilization.gpu 0%, no name or limit
    # (nvidia-smi power.draw and utilization.gpu only) read as "not_pipeline: one GPU works":
    # power scaled to the window's own maximum made the warmest card look busy.
    rng = np.random.default_rng(0)
    power = 117.0 + np.arange(8)[:, None] * 0.8 + rng.normal(0, 0.3, (8, 120))
    d = diagnose(_power_util(power, np.zeros((8, 120))))
    assert d.verdict is Verdict.IDLE
    assert d.findings[0].evidence["kernel_busy_top_gpu_ratio"] == 0.0


def test_brief_set_up_kernels_stay_idle() -> None:
    # Model loading shows the odd 1-16% sample; kernels ran well under 2% of the window.
    util = np.zeros((3, 120))
    util[:, 40:43] = 0.15
    power = np.full((3, 120), 55.0) + np.array([[0.0], [3.0], [6.0]])
    assert diagnose(_power_util(power, util)).verdict is Verdict.IDLE


def test_work_on_one_gpu_is_not_idle() -> None:
    util = np.zeros((4, 120))
    util[2] = 0.9
    power = np.full((4, 120), 120.0)
    power[2] = 400.0
    assert diagnose(_power_util(power, util)).verdict is not Verdict.IDLE


def test_sm_activity_that_shows_work_outweighs_a_zero_counter() -> None:
    sm = np.full((2, 120), 0.6)
    d = diagnose(_power_util(np.full((2, 120), 300.0), np.zeros((2, 120)), sm))
    assert d.verdict is not Verdict.IDLE
