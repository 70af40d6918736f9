"""The daemon's exported bubble ratio holds still on an unchanged run (it jumped with the
window's length, 0.08 at 40 s then 0.43 from 60 s, on simulated pp8-async), and a compute level
one window resolved serves the next windows of the job that cannot see it."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineAnalyzer
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording, recording_from_arrays
from bubblewatch.model.topology import Topology
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sinks.snapshot import pipeline_state

T0 = 1_775_000_000.0


def test_bubble_ratio_does_not_jump_across_successive_windows() -> None:
    res = simulate(load_scenario("pp8-async"), duration_s=150.0, seed=0)
    rec = observe(res, interval_s=1.0, seed=0)
    analyzer = PipelineAnalyzer(Pipeline("pp8", topology=res.topology, engine=None))
    rules = RuleEngine(load_rules())
    t0 = rec.start_s
    exported = []
    # As the daemon's 60 s window fills (20 s, 40 s) and then slides, every 10 s.
    for end in range(20, 151, 10):
        window = rec.window(max(t0, t0 + end - 60.0), t0 + end)
        result = analyzer.step(window, rules, t0 + end)
        state = pipeline_state("pp8", result.diagnosis, topology=res.topology, engine=None)
        assert state.bubble_ratio is not None
        exported.append(state.bubble_ratio)
        ev = result.diagnosis.evidence
        low, high = ev["bubble_ratio_low"], ev["bubble_ratio_high"]
        assert isinstance(low, float) and isinstance(high, float)
        assert low <= state.bubble_ratio <= high
    assert max(exported) - min(exported) <= 0.05, exported


def _window(t0: float, sm: np.ndarray) -> Recording:
    n = sm.shape[1]
    values = {
        Metric.SM_ACTIVE_RATIO: sm,
        Metric.KERNEL_BUSY_RATIO: np.ones_like(sm),
        Metric.POWER_AVG_W: 150.0 + 300.0 * sm,
    }
    gpus = [GpuInfo(index=i, name="NVIDIA H100 80GB HBM3") for i in range(sm.shape[0])]
    return recording_from_arrays(t0 + np.arange(n, dtype=float), values, gpus=gpus)


def test_a_level_learned_in_one_window_serves_the_next_that_cannot_see_it() -> None:
    rng = np.random.default_rng(0)
    topo = Topology(stages=((0,), (1,), (2,), (3,)))
    rules = RuleEngine(load_rules())
    # Window 1: each stage's samples resolve its turns, computing at SM 0.85 half the time.
    turns = np.where(rng.random((4, 60)) < 0.5, 0.85, 0.02) + rng.normal(0, 0.005, (4, 60))
    # Window 2: the same work averaged within each sample: SM ~0.435, never at the level.
    flat = 0.435 + rng.normal(0, 0.005, (4, 60))
    analyzer = PipelineAnalyzer(Pipeline("pp4", topology=topo, engine=None))
    first = analyzer.step(_window(T0, np.clip(turns, 0, 1)), rules, T0 + 60)
    assert set(first.diagnosis.evidence["compute_level_source"].values()) == {"learned"}  # type: ignore[union-attr]
    second = analyzer.step(_window(T0 + 60, flat), rules, T0 + 120).diagnosis.evidence
    assert set(second["compute_level_source"].values()) == {"history"}  # type: ignore[union-attr]
    assert second["bubble_ratio"] == pytest.approx(0.5, abs=0.03)
    # Without the first window the level is only assumed (0.75): the bubble reads lower.
    fresh = PipelineAnalyzer(Pipeline("pp4", topology=topo, engine=None))
    alone = fresh.step(_window(T0 + 60, flat), rules, T0 + 120).diagnosis.evidence
    assert set(alone["compute_level_source"].values()) == {"assumed"}  # type: ignore[union-attr]
    assert isinstance(alone["bubble_ratio"], float) and alone["bubble_ratio"] < 0.45
    # An engine restart voids what was learned.
    analyzer.reset_holds()
    again = analyzer.step(_window(T0 + 120, flat), rules, T0 + 180).diagnosis.evidence
    assert set(again["compute_level_source"].values()) == {"assumed"}  # type: ignore[union-attr]
