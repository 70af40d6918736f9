"""The daemon judges a discovered training pipeline against its layout's schedule."""

from __future__ import annotations

import shlex

import pytest

from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineAnalyzer
from bubblewatch.detect import Verdict
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sinks.snapshot import pipeline_state
from bubblewatch.topology.training import LocalFiles, training_from_cmdline


def _engine(cmd: str):
    job = training_from_cmdline(shlex.split(cmd), {}, [], files=LocalFiles())
    assert job is not None
    return job.engine_config()


def test_the_layouts_schedule_judges_the_measured_bubble() -> None:
    sc = load_scenario("pp4-1f1b-loader")
    res = simulate(sc, duration_s=60.0, seed=0)
    window = observe(res, interval_s=0.1, seed=0)
    engine = _engine(" ".join(sc.argv))  # Megatron: pp 4, micro 1, global 8 -> m = 8
    assert engine.training is not None and engine.training.micro_batches == 8
    analyzer = PipelineAnalyzer(Pipeline("train", topology=res.topology, engine=engine))
    rules = RuleEngine(load_rules())
    first = analyzer.step(window, rules, window.end_s)
    assert "TrainingDataLoaderStall" not in {r.rule for r in first.recommendations}  # for: 5m
    result = analyzer.step(window, rules, window.end_s + 301.0)
    ev = result.diagnosis.evidence
    assert ev["expected_bubble_ratio"] == pytest.approx(3 / 11, abs=1e-3)
    assert ev["schedule_judgement"] == "below"
    assert ev["excess_cause"] == "data_loader_stall" and ev["excess_stage"] == 0
    assert result.diagnosis.verdict is Verdict.BELOW_SCHEDULE
    assert {r.rule for r in result.recommendations} >= {"TrainingDataLoaderStall"}
    # ... and what the exporter publishes for the alert and the dashboard row
    state = pipeline_state("train", result.diagnosis, topology=res.topology, engine=engine)
    assert state.measured_bubble_ratio == pytest.approx(ev["measured_bubble_ratio"])
    assert state.step_period_s is not None and 0.7 < state.step_period_s < 0.9
    assert all(s.step_busy_s is not None for s in state.stages)


def test_without_a_layout_nothing_is_judged() -> None:
    res = simulate(load_scenario("pp4-1f1b-loader"), duration_s=30.0, seed=0)
    window = observe(res, interval_s=0.1, seed=0)
    analyzer = PipelineAnalyzer(Pipeline("train", topology=res.topology, engine=None))
    ev = analyzer.step(window, RuleEngine(load_rules()), window.end_s).diagnosis.evidence
    assert ev["schedule_judgement"] is None and ev["measured_bubble_ratio"] is None
    assert ev["step_period_s"] is None
