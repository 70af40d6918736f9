"""benchmarks/measurement_error.py on a small grid: truth per window, signal sets, the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its _report helper
    spec = importlib.util.spec_from_file_location(
        "measurement_error", ROOT / "benchmarks" / "measurement_error.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["measurement_error"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_small_grid_scores_against_the_truth() -> None:
    me = _module()
    grid = me.Grid(40.0, (15.0,), (1.0,), (0,), None)
    rows = list(me.measure_run("pp8-serialized", 0, grid))
    # 2 windows of 15 s after the 10 s warm-up, and the long run, per signal set
    assert len(rows) == 3 * len(me.SIGNAL_SETS)
    sm = [r for r in rows if r.signal == "sm_activity"]
    for r in sm:
        assert 0.8 < r.true_bubble < 0.95  # one micro-batch in flight over 8 stages
        assert r.bubble is not None and abs(r.bubble - r.true_bubble) < 0.05
        assert r.bubble_low is not None and r.bubble_high is not None
        assert r.bubble_low - 0.005 <= r.true_bubble <= r.bubble_high + 0.005
    # the nvidia-smi set has no SM activity: the bubble comes from power
    smi = next(r for r in rows if r.signal == "nvidia_smi")
    assert smi.bubble is not None and smi.bubble != sm[0].bubble
    lines = me.table(rows, grid, 1.0, "cmd")
    assert any(line.startswith("| sm_activity | 2 | 0 |") for line in lines)
    assert any(line.startswith("| pp8-serialized |") for line in lines)


def test_dcgmi_set_drops_the_gpu_facts() -> None:
    me = _module()
    from bubblewatch.sim import load_scenario, observe, simulate

    rec = observe(simulate(load_scenario("pp4-throttled"), 5.0, 0), interval_s=1.0)
    cut = me.keep_signal(rec, "dcgmi")
    assert all(g.power_limit_w is None and not g.name for g in cut.gpus)
    smi = me.keep_signal(rec, "nvidia_smi")
    assert all(not s.has(me.Metric.SM_ACTIVE_RATIO) for s in smi.series.values())
    assert all(g.power_limit_w == pytest.approx(600.0) for g in smi.gpus)


def test_a100_overrides_play_the_scenario_on_a100s() -> None:
    me = _module()
    from bubblewatch.sim import apply_overrides, load_scenario

    sc = apply_overrides(load_scenario("pp8-serialized"), me.A100_SXM4)
    gpu = sc.hardware.gpu
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.power_limit_w == 400
    assert gpu.power_usage_window_s == gpu.instant_power_window_s  # GA100: an instant
    grid = me.Grid(40.0, (15.0,), (1.0,), (0,), None)
    rows = list(me.measure_run("pp8-serialized", 0, grid, me.A100_SXM4))
    sm = [r for r in rows if r.signal == "sm_activity"]
    for r in sm:
        assert r.bubble_low is not None and r.bubble_high is not None
        assert r.bubble_low - 0.005 <= r.true_bubble <= r.bubble_high + 0.005


def test_gpu_model_names_the_dcgmi_set_again() -> None:
    # The dcgmi set drops the A100's name: its instant power is read as a 1 s mean and the
    # range widens; named as `analyze --gpu-model` names it, the range is the named set's.
    me = _module()
    grid = me.Grid(40.0, (15.0,), (1.0,), (0,), None)
    plain = list(me.measure_run("pp8-serialized", 0, grid, me.A100_SXM4))
    named = list(me.measure_run("pp8-serialized", 0, grid, me.A100_SXM4, gpu_model=True))

    def widths(rows, signal):
        return [r.bubble_high - r.bubble_low for r in rows if r.signal == signal]

    assert widths(named, "sm_activity") == widths(plain, "sm_activity")
    assert max(widths(named, "dcgmi")) < min(widths(plain, "dcgmi"))
    assert widths(named, "dcgmi") == pytest.approx(widths(named, "sm_activity"), abs=1e-9)
