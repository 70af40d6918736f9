"""Before and after: the comparison of two diagnoses and the `compare` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.detect import diagnose
from bubblewatch.detect.compare import compare, predict, side_from
from bubblewatch.detect.types import Diagnosis, StageStats, Verdict
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sources.trace import write_trace

from .kineto_gen import PipelineSpec, write_pipeline_traces

SIM_S = 20.0


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory):
    """Recordings and trace files of three simulated PP8 runs (20 s each)."""
    d = tmp_path_factory.mktemp("sims")
    out = {}
    for name in ("pp8-serialized", "pp8-async", "pp8-single-request"):
        rec = observe(simulate(load_scenario(name), duration_s=SIM_S, seed=0), interval_s=0.5)
        path = d / f"{name}.jsonl.gz"
        write_trace(path, rec)
        out[name] = (rec, path)
    return out


def test_serialized_to_async_is_borne_out(sims):
    (b_rec, _), (a_rec, _) = sims["pp8-serialized"], sims["pp8-async"]
    c = compare(
        diagnose(b_rec),
        diagnose(a_rec),
        before_meta=b_rec.meta,
        after_meta=a_rec.meta,
        before_gpus=8,
        after_gpus=8,
    )
    assert (c.before.verdict, c.after.verdict) == ("serialized", "healthy")
    assert c.after.concurrency > 3 * c.before.concurrency
    assert c.changes["tokens_per_s"]["ratio"] > 3.0
    assert c.prediction is not None and c.prediction.concurrency == 8.0
    assert [ch.name for ch in c.checks] == ["verdict", "concurrency", "throughput"]
    assert all(ch.passed for ch in c.checks)
    assert c.borne_out is True
    assert "borne out" in c.summary and "NOT" not in c.summary
    assert c.after.joules_per_token < c.before.joules_per_token


def test_fix_applied_to_a_single_request_is_not_borne_out(sims):
    (b_rec, _), (a_rec, _) = sims["pp8-serialized"], sims["pp8-single-request"]
    c = compare(diagnose(b_rec), diagnose(a_rec), before_meta=b_rec.meta, after_meta=a_rec.meta)
    assert c.after.verdict == "serialized"
    assert c.borne_out is False
    failed = {ch.name for ch in c.checks if ch.passed is False}
    assert {"verdict", "throughput"} <= failed
    assert "NOT borne out" in c.summary


def test_load_limited_before_predicts_nothing(sims):
    rec, _ = sims["pp8-single-request"]
    d = diagnose(rec)
    assert d.load_limited is True
    c = compare(d, d, before_meta=rec.meta, after_meta=rec.meta)
    assert c.prediction is None and c.borne_out is None
    assert "Nothing was predicted" in c.summary


def _diag(verdict: Verdict, conc: float, occ: list[float], power: float | None = 200.0):
    stages = tuple(
        StageStats(i, (i,), o, o, 0.9, power, 80.0, 0.1, None, 10.0) for i, o in enumerate(occ)
    )
    ev = {"concurrency": conc, "bubble_ratio": 1 - conc / len(occ), "pp_size": len(occ),
          "bubble_energy_j": 500.0}  # fmt: skip
    return Diagnosis(verdict, 0.9, (), stages, 100.0, 800, load_limited=False, evidence=ev)


def test_rule_factor_sets_the_throughput_bar():
    before = _diag(Verdict.SERIALIZED, 1.0, [0.25] * 4)
    after = _diag(Verdict.HEALTHY, 3.0, [0.75] * 4)
    recs = [{"rule": "PipelineSerializedUnderLoad", "expected_gain": {"metric": "throughput",
             "factor": 3.0}}]  # fmt: skip
    ok = compare(before, after, before_meta={"tokens_per_s": 100}, after_meta={"tokens_per_s": 201},
                 recommendations=recs)  # fmt: skip
    assert ok.prediction is not None and ok.prediction.source == "rule PipelineSerializedUnderLoad"
    assert ok.prediction.concurrency == 3.0  # 1.0 x 3, below pp_size 4
    assert ok.borne_out is True
    short = compare(before, after, before_meta={"tokens_per_s": 100},
                    after_meta={"tokens_per_s": 190}, recommendations=recs)  # fmt: skip
    assert short.borne_out is False
    assert next(c for c in short.checks if c.name == "throughput").passed is False


def test_sides_without_power_or_tokens():
    d = _diag(Verdict.HEALTHY, 3.9, [0.97] * 4, power=None)
    s = side_from(d, {}, "x", 4)
    assert s.mean_power_w is None and s.joules_per_token is None and s.tokens_per_s is None
    assert s.bubble_power_w == 5.0
    assert predict(s) is None
    assert json.dumps(compare(d, d).to_dict())


def test_compare_command_on_simulated_traces(sims, capsys):
    b, a = sims["pp8-serialized"][1], sims["pp8-async"][1]
    assert main(["compare", str(b), str(a), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["borne_out"] is True
    assert out["before"]["verdict"] == "serialized" and out["after"]["verdict"] == "healthy"
    assert out["changes"]["tokens_per_s"]["ratio"] > 3
    assert main(["compare", str(b), str(a)]) == 0
    text = capsys.readouterr().out
    assert "The recommendation was borne out." in text and "tokens/s" in text


def test_compare_command_on_profiler_traces(tmp_path, capsys):
    spec = PipelineSpec(pp=4, in_flight=1, duration_s=11.0, naming="plain")
    write_pipeline_traces(tmp_path / "before", spec)
    write_pipeline_traces(tmp_path / "after", PipelineSpec(pp=4, in_flight=4, duration_s=11.0))
    assert main(["compare", str(tmp_path / "before"), str(tmp_path / "after"), "--json",
                 "--pp-size", "4"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["before"]["verdict"] == "serialized"
    assert out["after"]["verdict"] == "healthy"
    assert out["borne_out"] is True


def test_compare_command_bad_input(tmp_path: Path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["compare", str(empty), str(empty)]) == 2
    assert "directory without profiler traces" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "no.jsonl"), str(tmp_path / "no.jsonl")]) == 2
