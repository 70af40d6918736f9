"""Pipeline training profiler traces: stages from named process groups, exact bubble per step."""

from __future__ import annotations

import pytest

from bubblewatch.sources.kineto import load_kineto

from .kineto_train_gen import TrainSpec, write_training_traces


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(4, 4), (4, 16), (2, 8)])
def test_equal_stages_match_the_schedule_formula(tmp_path, schedule, p, m) -> None:
    paths, truth = write_training_traces(
        tmp_path, TrainSpec(pp=p, micro_batches=m, schedule=schedule)
    )
    rec = load_kineto(paths)
    meta = rec.meta["kineto"]
    assert meta["topology_source"] == "pipeline_groups"
    steps = meta["pipeline_steps"]
    assert [s["step"] for s in steps["steps"]] == [10, 11, 12]
    for i, st in enumerate(steps["steps"]):
        assert st["bubble_ratio"] == pytest.approx(truth.bubble(i), abs=1e-4)
    # With free links and no optimizer time the bubble is exactly (p-1)/(m+p-1).
    assert steps["bubble_ratio_mean"] == pytest.approx((p - 1) / (m + p - 1), abs=1e-4)


def test_slow_stage_and_optimizer_time_count_against_the_pipeline(tmp_path) -> None:
    spec = TrainSpec(pp=4, micro_batches=8, slow_stage=2, link_us=50.0, optimizer_us=1_000.0)
    paths, truth = write_training_traces(tmp_path, spec)
    steps = load_kineto(paths).meta["kineto"]["pipeline_steps"]
    for i, st in enumerate(steps["steps"]):
        assert st["bubble_ratio"] == pytest.approx(truth.bubble(i), abs=1e-4)
        # The slow stage is the busiest; the others wait on it in recv kernels.
        busy = st["stage_busy_ratio"]
        assert busy.index(max(busy)) == 2
        assert min(st["stage_p2p_wait_ratio"]) >= 0.0
        assert st["stage_p2p_wait_ratio"][0] > st["stage_p2p_wait_ratio"][2]
    assert steps["bubble_ratio_mean"] > 3 / 11  # worse than the equal-stage formula


def test_torchtitan_mesh_group_name_is_recognised(tmp_path) -> None:
    paths, _ = write_training_traces(tmp_path, TrainSpec(pp=2, micro_batches=4, pg_desc="mesh_pp"))
    rec = load_kineto(paths)
    assert rec.meta["kineto"]["topology_source"] == "pipeline_groups"
    assert rec.topology is not None and rec.topology.stages == ((0,), (1,))


def test_no_named_group_no_steps_falls_back(tmp_path) -> None:
    paths, _ = write_training_traces(tmp_path, TrainSpec(pp=2, pg_desc="undefined"))
    rec = load_kineto(paths)
    assert rec.meta["kineto"]["topology_source"] != "pipeline_groups"


def test_analyze_prints_the_exact_bubble_per_step(tmp_path, capsys) -> None:
    import json

    from bubblewatch.cli.main import main

    write_training_traces(tmp_path / "tr", TrainSpec(pp=4, micro_batches=4))
    assert main(["analyze", str(tmp_path / "tr"), "--format", "kineto", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "training steps (profiler trace, exact): 3 steps over 4 stages" in out
    assert "bubble: mean 42.9%, median 42.9%" in out
    assert main(["analyze", str(tmp_path / "tr"), "--format", "kineto", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipeline_steps"]["bubble_ratio_mean"] == pytest.approx(3 / 7, abs=1e-4)


def test_compare_puts_telemetry_estimate_beside_the_trace(tmp_path, capsys) -> None:
    import json
    from dataclasses import replace

    from detect.synth import make_recording  # tests/ is the import root (no __init__.py)

    from bubblewatch.cli.main import main
    from bubblewatch.model.topology import Topology
    from bubblewatch.sources.trace import write_trace

    write_training_traces(tmp_path / "tr", TrainSpec(pp=4, micro_batches=4))
    rec = make_recording("healthy", pp=4, tp=1, k=4, running=None, queued=None)
    write_trace(tmp_path / "t.jsonl", replace(rec, topology=Topology.from_sizes(4)))
    argv = ["compare", str(tmp_path / "t.jsonl"), str(tmp_path / "tr"), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    cmp = doc["trace_vs_telemetry"]
    assert cmp["trace_side"] == "after"
    assert cmp["trace_bubble_ratio"] == pytest.approx(3 / 7, abs=1e-4)
    assert cmp["telemetry_bubble_ratio"] is not None
    assert cmp["difference"] == pytest.approx(
        cmp["telemetry_bubble_ratio"] - cmp["trace_bubble_ratio"], abs=1e-4
    )
