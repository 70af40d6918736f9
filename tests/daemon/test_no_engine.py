"""A host where no engine is discovered: no pipeline verdict and no pipeline alert."""

from __future__ import annotations

from dataclasses import replace

from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineAnalyzer
from bubblewatch.daemon.pipelines.discovery import sim_pipelines
from bubblewatch.detect import Verdict, diagnose
from bubblewatch.detect.types import PIPELINE_VERDICTS
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.topology.single_process import SingleProcessJob


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


def _layer_split_window():
    """One process's layer split over 3 GPUs at 0.1 s, as the daemon samples it (no topology)."""
    sc = apply_overrides(
        load_scenario("layersplit4"),
        {"job.pp_size": 3, "job.stage_forward_s": [0.09], "job.loading_s": 0.0},
    )
    res = simulate(sc, duration_s=150.0, seed=2)
    return replace(observe(res, interval_s=0.1, seed=2), topology=None)


def test_gpus_taking_turns_are_judged_only_where_one_process_holds_them() -> None:
    window = _layer_split_window()
    rules = RuleEngine(load_rules())
    unknown = PipelineAnalyzer(Pipeline("host", topology=None, engine=None))
    result = unknown.step(window, rules, window.end_s)
    assert result.diagnosis.verdict not in PIPELINE_VERDICTS
    one = Pipeline("host", None, None, single_process="pid 40 (unknown) on GPUs 0,1,2")
    analyzer = PipelineAnalyzer(one)
    result = analyzer.step(window, rules, window.end_s)
    assert result.diagnosis.verdict is Verdict.SERIALIZED
    assert result.diagnosis.evidence["pipeline_evidence"] == "turn_taking"
    assert result.diagnosis.evidence["inferred_stages"] == [[0], [1], [2]]
    result = analyzer.step(window, rules, window.end_s + 180.0)  # held past the rule's for: 2m
    rec = next(r for r in result.recommendations if r.rule == "LayerSplitSerialized")
    assert rec.fix is not None and rec.fix.note is not None
    assert "vllm serve MODEL --tensor-parallel-size 3" in rec.fix.note


def test_the_discovered_layer_placement_orders_the_stages() -> None:
    """Without idle gaps the turns cannot order the GPUs; where the layers are does."""
    sc = apply_overrides(
        load_scenario("layersplit4"),
        {"job.pp_size": 3, "job.stage_forward_s": [0.09], "job.loading_s": 0.0, "job.stalls": []},
    )
    rec = observe(simulate(sc, duration_s=150.0, seed=4), interval_s=0.1, seed=4)
    placed = (1, 2, 0)  # stage s's telemetry on GPU placed[s]
    window = replace(
        rec, topology=None, series={g: replace(rec.series[s], gpu=g) for s, g in enumerate(placed)}
    )
    # llama-server -ts 3,2,1: the most memory on GPU 1, then GPU 2, then GPU 0.
    gib = 1 << 30
    job = SingleProcessJob(
        40, (0, 1, 2), "llama.cpp", "layer", (3.0, 2.0, 1.0), (10 * gib, 30 * gib, 20 * gib)
    )
    pipe = Pipeline("host", None, None, single_process=str(job), process=job)
    result = PipelineAnalyzer(pipe).step(window, RuleEngine(load_rules()), window.end_s)
    assert result.diagnosis.verdict is Verdict.SERIALIZED
    assert result.diagnosis.evidence["inferred_stages"] == [[1], [2], [0]]
    assert result.diagnosis.evidence["stage_order_source"] == "layer placement"


def test_discovery_names_one_process_on_three_gpus() -> None:
    from bubblewatch.daemon.pipelines.discovery import discover_pipelines
    from bubblewatch.model.inventory import GpuInfo

    gpus = [GpuInfo(index=i, uuid=f"GPU-{i}") for i in range(4)]
    pid = 2**22 + 12345  # above any pid_max default: no such process, its runtime unknown
    lookup = discover_pipelines({0: [pid], 1: [pid], 2: [pid], 3: []}, gpus, instance="h")
    (pipe,) = lookup.pipelines
    assert pipe.engine is None and pipe.topology is None
    assert pipe.single_process == f"pid {pid} (unknown, split unknown) on GPUs 0,1,2"
    alone = discover_pipelines({0: [pid], 1: [pid + 1]}, gpus, instance="h")
    assert alone.pipelines[0].single_process is None
