"""The per-second ground truth of a simulated run, and its `x_truth` records in a trace."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bubblewatch.sim import SimResult, load_scenario, simulate
from bubblewatch.sim.stream import simulate_to_trace
from bubblewatch.sim.truth_series import TRUTH_RECORD, FloatArray, TruthSeries, step_window_means
from bubblewatch.sources.trace import read_trace
from bubblewatch.sources.trace.format import open_text


def read_truth(path: str | os.PathLike[str]) -> TruthSeries | None:
    """The `x_truth` records of a trace as a TruthSeries (t_s from the run's start); None: none."""
    rows: list[dict[str, Any]] = []
    epoch: float | None = None
    with open_text(path) as f:
        for n, line in enumerate(f):
            if n == 0:
                meta = json.loads(line).get("meta", {})
                epoch = float(meta.get("sim_t0_epoch_s", 0.0))
            elif TRUTH_RECORD in line[:40]:
                rows.append(json.loads(line))
    if not rows:
        return None

    def cols(key: str) -> FloatArray:
        out: FloatArray = np.array([r[key] for r in rows], dtype=np.float64).T
        return out

    return TruthSeries(
        t_s=np.array([r["t"] for r in rows]) - (epoch or 0.0),
        span_s=np.array([r["span_s"] for r in rows], dtype=np.float64),
        busy=cols("busy"),
        spin=cols("spin"),
        energy_j=cols("energy_j"),
        bubble_energy_j=cols("bubble_energy_j"),
        in_flight=cols("in_flight"),
    )


def test_step_window_means_by_hand() -> None:
    # 2 from 0 s, 4 from 1.5 s, 0 from 3 s: windows [0,1) [1,2) [2,3) [3,4)
    got = step_window_means(
        np.array([0.0, 1.5, 3.0]), np.array([2.0, 4.0, 0.0]), np.arange(5, dtype=float)
    )
    np.testing.assert_allclose(got, [2.0, 3.0, 4.0, 0.0])


@pytest.mark.parametrize("name", ["pp8-serialized", "pp4-1f1b"])
def test_windows_add_up_to_the_run_truth(name: str) -> None:
    res = simulate(load_scenario(name), 12.5, 1)
    ts = res.truth_series
    assert ts is not None
    assert ts.n_windows == 13 and ts.span_s[-1] == pytest.approx(0.5)
    busy = ts.mean_busy()
    for st in res.truth.stages:
        assert float(busy[list(st.gpus)].mean()) == pytest.approx(st.busy_ratio, abs=1e-9)
    for rep, k in zip(res.truth.replicas, ts.mean_in_flight(), strict=True):
        assert float(k) == pytest.approx(rep.mean_in_flight, rel=1e-6, abs=1e-9)
    energy = res.timeline.field("power_w").astype(np.float64).sum(axis=1) * res.timeline.dt_s
    np.testing.assert_allclose(ts.energy_j.sum(axis=1), energy, rtol=1e-6)
    # Waiting draws above idle only while spinning, and never more than all the energy.
    assert ((ts.bubble_energy_j > 0) <= (ts.spin > 0)).all()
    assert (ts.bubble_energy_j <= ts.energy_j).all()


def test_serialized_truth_in_a_window() -> None:
    res = simulate(load_scenario("pp8-serialized"), 20.0, 0)
    assert res.truth_series is not None
    late = res.truth_series.over(10.0, 20.0)
    assert late.n_windows == 10
    # One micro-batch in flight: the stages' busy shares sum to about one.
    assert 0.6 < float(late.mean_busy().sum()) <= 1.05
    assert late.mean_in_flight()[0] == pytest.approx(1.0, abs=0.05)


def test_trace_carries_truth_that_readers_skip(tmp_path: Path, serialized: SimResult) -> None:
    path = tmp_path / "t.jsonl"
    simulate_to_trace(
        load_scenario("pp8-serialized"),
        path,
        duration_s=30.0,
        seed=0,
        interval_s=1.0,
        summary=lambda tps, truth: {"truth": truth.to_dict()},
        part_s=7.0,
    )
    got = read_truth(path)
    want = serialized.truth_series
    assert got is not None and want is not None
    np.testing.assert_allclose(got.t_s, want.t_s, atol=1e-6)
    np.testing.assert_allclose(got.busy, want.busy, atol=1e-4)
    np.testing.assert_allclose(got.in_flight, want.in_flight, atol=1e-3)
    np.testing.assert_allclose(got.bubble_energy_j, want.bubble_energy_j, rtol=1e-4, atol=0.01)
    # The same file without its truth records reads as the same recording.
    lines = path.read_text().splitlines(keepends=True)
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(x for x in lines if json.loads(x).get("type") != "x_truth"))
    assert len(lines) - len(bare.read_text().splitlines()) == 30
    a, b = read_trace(path), read_trace(bare)
    assert a.meta == b.meta and a.n_samples == b.n_samples
    for g, s in b.series.items():
        for m, v in s.values.items():
            np.testing.assert_array_equal(a.series[g].values[m], v)
