"""The daemon's exported bubble ratio holds still on an unchanged run (issue: it jumped with the
window's length, 0.08 at 40 s then 0.43 from 60 s, on simulated pp8-async)."""

from __future__ import annotations

from bubblewatch.daemon.analysis import Pipeline, PipelineAnalyzer
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sinks.snapshot import pipeline_state
from bubblewatch.sources.sim import load_scenario, observe, simulate


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
