"""A host where no engine is discovered: no pipeline verdict and no pipeline alert."""

from __future__ import annotations

from dataclasses import replace

from bubblewatch.daemon.analysis import Pipeline, PipelineAnalyzer
from bubblewatch.daemon.discovery import sim_pipelines
from bubblewatch.detect import Verdict, diagnose
from bubblewatch.detect.types import PIPELINE_VERDICTS
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sources.sim import load_scenario, observe, simulate


def _staggered_window():
    """A serialized PP8 sampled at 0.2 s with its topology dropped: its stagger shows a pipeline."""
    res = simulate(load_scenario("pp8-serialized"), duration_s=60.0, seed=3)
    return replace(observe(res, interval_s=0.2, seed=3), topology=None)


def test_no_engine_no_topology_means_no_pipeline_verdict_or_alert() -> None:
    window = _staggered_window()
    # The detector alone would infer the pipeline from the stagger ...
    assert diagnose(window).verdict is Verdict.SERIALIZED
    # ... but the daemon, having discovered no engine, does not judge it a pipeline.
    analyzer = PipelineAnalyzer(Pipeline("host", topology=None, engine=None))
    result = analyzer.step(window, RuleEngine(load_rules()), window.end_s)
    assert result.diagnosis.verdict not in PIPELINE_VERDICTS
    assert not any(result.diagnosis.has(v) for v in PIPELINE_VERDICTS)
    assert "no engine or topology known" in result.diagnosis.evidence["inference"]
    signatures = {r.labels.get("signature") for r in result.recommendations}
    assert not signatures & {"serialized", "launch_bound", "imbalanced"}


def test_with_a_topology_the_pipeline_is_judged() -> None:
    window = _staggered_window()
    res = simulate(load_scenario("pp8-serialized"), duration_s=1.0, seed=0)
    analyzer = PipelineAnalyzer(Pipeline("host", topology=res.topology, engine=None))
    result = analyzer.step(window, RuleEngine(load_rules()), window.end_s)
    assert result.diagnosis.verdict is Verdict.SERIALIZED


def test_a_simulated_job_without_pipelines_is_analysed_as_one_group() -> None:
    sc = load_scenario("dp8-training")
    lookup = sim_pipelines((), sc.engine_argv, instance="h")
    assert len(lookup.pipelines) == 1
    assert lookup.pipelines[0].topology is None and lookup.pipelines[0].engine is None
