"""The gains the shipped rules quote are what the simulator predicts for the seed case."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def calibrate():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "bw_calibrate_gains", ROOT / "benchmarks/calibrate.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bw_calibrate_gains"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_rule_params_match_the_simulators_predictions(calibrate) -> None:  # type: ignore[no-untyped-def]
    params = yaml.safe_load((ROOT / "rules/bubblewatch.rules.yaml").read_text())["params"]
    gains = calibrate.rule_gains(calibrate.predict(duration_s=60.0, seed=0))
    for name, value in gains.items():
        assert params[name] == pytest.approx(value, abs=0.015), name
    # The story the rules tell: depth alone adds nothing, the per-slot cap fills the pipeline.
    assert gains["sim_gain_depth_alone"] == pytest.approx(1.0, abs=0.01)
    assert gains["sim_gain_cap_graphs_off"] > 1.5
