"""The simulator written a part at a time: the trace `simulate` + `observe` + `write_trace` give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.model.metrics import Metric
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.stream import simulate_to_trace
from bubblewatch.sources.trace import read_trace, write_trace

_ROUNDED = {
    Metric.TEMPERATURE_C: 1.0,
    Metric.SM_CLOCK_MHZ: 1.0,
    Metric.KERNEL_BUSY_RATIO: 0.01,
    Metric.ENERGY_J: 0.001,
}


@pytest.mark.parametrize(
    ("scenario", "interval_s"),
    [("pp8-serialized", 0.1), ("pp4-throttled", 0.5), ("pp4x2", 1.0), ("dp8", 0.2)],
)
def test_parts_write_what_the_whole_run_writes(
    tmp_path: Path, scenario: str, interval_s: float
) -> None:
    sc = load_scenario(scenario)
    res = simulate(sc, 40.0, 3)
    whole = tmp_path / "whole.jsonl"
    summary = {"truth": res.truth.to_dict(), "tokens_per_s": round(res.tokens_per_s, 3)}
    write_trace(whole, observe(res, interval_s=interval_s, seed=3), summary=summary)
    parts = tmp_path / "parts.jsonl"
    run = simulate_to_trace(
        sc,
        parts,
        duration_s=40.0,
        seed=3,
        interval_s=interval_s,
        summary=lambda tps, truth: {"truth": truth.to_dict(), "tokens_per_s": round(tps, 3)},
        part_s=7.0,  # parts that cut ticks and the windows polls read
    )
    a, b = read_trace(parts), read_trace(whole)
    assert run.n_samples == a.n_samples == b.n_samples
    assert a.meta == b.meta  # the outcome comes with the summary, merged into the meta
    assert a.gpus == b.gpus and a.topology == b.topology
    np.testing.assert_array_equal(a.load.t_s, b.load.t_s)
    np.testing.assert_array_equal(a.load.running, b.load.running)
    for g, s in b.series.items():
        np.testing.assert_array_equal(a.series[g].t_s, s.t_s)
        assert set(a.series[g].values) == set(s.values)
        for m, v in s.values.items():
            # Sums taken part by part: the last digits may differ, and so a value rounded
            # to whole units (temperature, clock, utilization's percent) at a rare half.
            got = a.series[g].values[m]
            np.testing.assert_array_equal(np.isnan(got), np.isnan(v))
            off = ~np.isclose(got, v, rtol=1e-4, atol=1e-6, equal_nan=True)
            unit = _ROUNDED.get(m, 0.0)
            assert off.mean() <= 0.01 and np.all(np.abs(got - v)[off] <= unit * 1.001), m


def test_cli_streams_serving_runs_and_holds_training_and_timelines_whole(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["simulate", "pp4-1f1b", "--duration", "20", "-o", str(out)]) == 0
    rec = read_trace(out)
    assert rec.meta["scenario"] == "pp4-1f1b" and "truth" in rec.meta
    tl = tmp_path / "t.bwtl"
    argv = ["simulate", "pp4-1f1b", "--duration", "20", "-o", str(out), "--timeline", str(tl)]
    assert main(argv) == 0
    assert tl.stat().st_size > 0
    assert main(["simulate", "dp8-training", "--duration", "20", "-o", str(out)]) == 0
    assert read_trace(out).n_samples > 0
