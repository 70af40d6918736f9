"""Calibration against the seed (docs/simulator.md): tokens/s ratios and the power band."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate.py"


@pytest.fixture(scope="module")
def calibrate():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bw_calibrate", _PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bw_calibrate"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_calibration_bounds(calibrate) -> None:  # type: ignore[no-untyped-def]
    rows = calibrate.run(duration_s=60.0, seed=0)
    result = calibrate.checks(rows)
    by = {(r.case, r.concurrency): r for r in rows}
    # Seed direction: PP8 falls further behind TP8 as concurrency grows.
    assert result["direction_ok"], result
    for c, seed_ratio in ((1, 0.252), (8, 0.074)):
        sim = by[("pp8", c)].sim_tokens_per_s / by[("tp8", c)].sim_tokens_per_s
        assert seed_ratio / 2 <= sim <= seed_ratio * 2, (c, sim)
    # PP8 serialized at C=8: 150-200 W of 600 W per GPU (1 s average power).
    assert 150.0 <= by[("pp8", 8)].mean_power_w <= 200.0
    # Absolute PP8 throughput close to the seed's measurements.
    assert by[("pp8", 1)].sim_tokens_per_s == pytest.approx(24.7, rel=0.15)
    assert by[("pp8", 8)].sim_tokens_per_s == pytest.approx(95.6, rel=0.15)
    assert result["ok"]
