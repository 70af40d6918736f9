"""Issue 14's checks on the measured side: simulated 1F1B pipelines judged against their schedule.

p=4, m=4 reads within 0.05 of (p-1)/(m+p-1) = 0.43 and as good as its schedule; m=16 (0.16)
likewise; a stage 1.5x slower is `imbalanced`, naming it; `analyze` of the m=4 run with its
Megatron launch renders the micro-batch and interleaved options with their bubbles.
"""

from __future__ import annotations

import pytest

from bubblewatch.cli.main import main
from bubblewatch.detect import Verdict, diagnose
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sim.training_schedule import step_template
from bubblewatch.sources.trace import write_trace

MEGATRON_M4 = (
    "torchrun --nproc_per_node 4 pretrain_gpt.py --pipeline-model-parallel-size 4 "
    "--num-layers 32 --micro-batch-size 4 --global-batch-size 16"
)


def _run(overrides: dict[str, object], seed: int = 0, interval_s: float = 0.1):
    sc = apply_overrides(load_scenario("pp4-1f1b-m4"), overrides)
    res = simulate(sc, duration_s=60.0, seed=seed)
    return res, observe(res, interval_s=interval_s, seed=seed)


@pytest.mark.parametrize(("m", "formula"), [(4, 3 / 7), (16, 3 / 19)])
@pytest.mark.parametrize("seed", [0, 1])
def test_1f1b_reads_its_schedules_bubble_and_is_as_good_as_it(
    m: int, formula: float, seed: int
) -> None:
    res, rec = _run({"job.micro_batches": m}, seed=seed)
    d = diagnose(rec, res.topology, schedule=PipelineSchedule("1f1b", m))
    ev = d.evidence
    assert ev["expected_bubble_ratio"] == pytest.approx(formula, abs=1e-3)
    assert abs(ev["measured_bubble_ratio"] - formula) <= 0.05
    assert d.verdict is Verdict.HEALTHY and ev["schedule_judgement"] == "as_good"
    assert "as good as its schedule allows" in d.findings[0].summary
    # the steps themselves: the simulated step's length, waves through the stages in order
    job = res.scenario.job
    step_s = step_template(job).makespan_s + job.optimizer_s
    assert ev["step_period_s"] == pytest.approx(step_s, rel=0.02)
    assert ev["wave_order"] == [0, 1, 2, 3]


def test_a_stage_one_and_a_half_times_slower_is_imbalanced_and_named() -> None:
    res, rec = _run({"job.stage_forward_s": [0.02, 0.02, 0.03, 0.02]})
    d = diagnose(rec, res.topology, schedule=PipelineSchedule("1f1b", 4))
    assert d.verdict is Verdict.IMBALANCED
    imb = d.finding(Verdict.IMBALANCED)
    assert imb is not None and imb.stage == 2 and d.evidence["imbalanced_stage"] == 2
    below = d.finding(Verdict.BELOW_SCHEDULE)
    assert below is not None and below.stage == 2
    assert d.evidence["excess_cause"] == "slow_stage"
    assert d.evidence["measured_bubble_ratio"] > 3 / 7 + 0.05


def test_analyze_renders_micro_batch_and_interleaved_options_for_m4(tmp_path, capsys) -> None:
    _res, rec = _run({})
    path = tmp_path / "m4.jsonl"
    write_trace(path, rec)
    assert main(["analyze", str(path), "--engine-cmdline", MEGATRON_M4, "--color", "never"]) == 0
    # Recommendations are wrapped to the width: their words are read as one line.
    out = " ".join(capsys.readouterr().out.split())
    assert "as good as its schedule allows" in out
    assert "(p-1)/(m+p-1) = 3/(4+3) = 0.429" in out
    # the micro-batch option, with the bubble it leaves
    assert "16 micro-batches give 16%" in out and "--micro-batch-size 1" in out
    # the interleaved option, with its bubble
    assert "Interleaved 1F1B with 2 model chunks per rank cuts the bubble to 27%" in out
    assert "--num-layers-per-virtual-pipeline-stage 4" in out


def test_a_long_recording_is_judged_against_the_launchs_schedule_too(tmp_path, capsys) -> None:
    """Read in windows (more samples than one window holds), the launch still gives the schedule."""
    import json

    _res, rec = _run({})
    path = tmp_path / "m4.jsonl"
    write_trace(path, rec)
    evidence = []
    for extra in ([], ["--window-samples", "1000", "--window", "30"]):
        argv = ["analyze", str(path), "--engine-cmdline", MEGATRON_M4, "--json", *extra]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        assert ("recording" in out) == bool(extra)  # the second is read window by window
        evidence.append(out["evidence"])
    for ev in evidence:
        assert ev["expected_bubble_ratio"] == pytest.approx(3 / 7, abs=1e-3)
        assert ev["schedule_judgement"] == "as_good"


@pytest.fixture(scope="module")
def interleaved_trace(tmp_path_factory) -> str:
    sc = load_scenario("pp4-interleaved")
    res = simulate(sc, duration_s=40.0, seed=1)
    path = tmp_path_factory.mktemp("inter") / "inter.jsonl"
    write_trace(path, observe(res, interval_s=0.1, seed=1))
    return str(path)


def test_analyze_schedule_flags_interleaved(interleaved_trace: str, capsys) -> None:
    import json

    assert main(["analyze", interleaved_trace, "--schedule", "interleaved",
                 "--micro-batches", "8", "--json"]) == 0  # fmt: skip
    ev = json.loads(capsys.readouterr().out)["evidence"]
    assert ev["expected_bubble_ratio"] == pytest.approx(3 / 19, abs=1e-3)  # v=2 by default
    assert ev["expected_formula"] == "(p-1)/(v*m+p-1) = 3/(2*8+3) = 0.158"
    assert ev["schedule_judgement"] == "as_good"
    assert main(["analyze", interleaved_trace, "--schedule", "1f1b", "--micro-batches", "8",
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["evidence"]["expected_bubble_ratio"] == (
        pytest.approx(3 / 11, abs=1e-3)
    )


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--virtual-stages", "2"], "--virtual-stages needs --schedule interleaved"),
        (["--schedule", "gpipe", "--micro-batches", "4", "--virtual-stages", "2"],
         "virtual stages must be 1"),
        (["--schedule", "interleaved", "--micro-batches", "8", "--virtual-stages", "1"],
         "2 or more virtual stages"),
        (["--schedule", "1f1b"], "give --schedule and --micro-batches together"),
    ],
)  # fmt: skip
def test_bad_schedule_flags_are_clear_errors(
    interleaved_trace: str, capsys, args: list[str], where: str
) -> None:
    assert main(["analyze", interleaved_trace, *args]) == 2
    err = capsys.readouterr().err
    assert where in err and "Traceback" not in err
