"""A simulated training trace carries its schedule: every command judges the bubble against it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.sources.trace import read_trace

SCENARIO = "pp4-1f1b-loader"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    rc = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("sched") / "loader.jsonl")
    assert main(["simulate", SCENARIO, "--duration", "30", "-o", path]) == 0
    return path


def test_the_header_carries_the_schedule(trace: str) -> None:
    rec = read_trace(trace)
    assert rec.meta["schedule"] == {
        "kind": "1f1b",
        "micro_batches": 8,
        "virtual_stages": 1,
        "pp_size": 4,
    }
    # Sampled as the daemon samples a training pipeline, not at the 1 s default.
    assert rec.meta["interval_s"] == pytest.approx(0.125)


def test_analyze_diagnose_and_compare_agree(trace: str, capsys) -> None:
    # Regression: analyze and diagnose --simulate said "healthy" with no schedule to judge
    # against (the header had only the torchrun line), and compare never passed one.
    analyzed = _json(capsys, "analyze", trace)
    diagnosed = _json(capsys, "diagnose", "--simulate", SCENARIO, "--duration", "30")
    compared = _json(capsys, "compare", trace, trace)
    for d in (analyzed, diagnosed):
        assert d["verdict"] == "below_schedule"
        ev = d["evidence"]
        assert ev["excess_cause"] == "data_loader_stall" and ev["excess_stage"] == 0
        assert ev["expected_bubble_ratio"] == pytest.approx(3 / 11, abs=1e-3)
    a, b = analyzed["evidence"], diagnosed["evidence"]
    assert a["bubble_ratio"] == pytest.approx(b["bubble_ratio"], abs=0.01)
    assert compared["before"]["verdict"] == compared["after"]["verdict"] == "below_schedule"
    assert compared["before"]["bubble_ratio"] == pytest.approx(a["bubble_ratio"], abs=1e-3)


def test_the_command_line_schedule_wins(trace: str, capsys) -> None:
    d = _json(capsys, "analyze", trace, "--schedule", "gpipe", "--micro-batches", "64")
    assert d["evidence"]["expected_bubble_ratio"] == pytest.approx(3 / 67, abs=1e-3)


def _with_header(trace: str, path: Path, schedule: object, argv: list[str] | None) -> str:
    lines = Path(trace).read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["meta"]["schedule"] = schedule
    if argv is not None:
        header["topology"]["argv"] = argv
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    return str(path)


def test_a_malformed_recorded_schedule_is_said_and_ignored(trace: str, tmp_path, capsys, caplog):
    bad = {"kind": "1f1b", "micro_batches": "eight"}
    # Without a launch to read a layout from, nothing is left to judge the bubble against.
    alone = _with_header(trace, tmp_path / "alone.jsonl", bad, argv=["pretrain_gpt.py"])
    with caplog.at_level(logging.WARNING):
        d = _json(capsys, "analyze", alone)
    assert "schedule.micro_batches must be a whole number" in caplog.text
    assert d["evidence"]["expected_bubble_ratio"] is None
    # With the recorded torchrun line, its layout (m = 8) is judged against, as the daemon does.
    launched = _with_header(trace, tmp_path / "launched.jsonl", bad, argv=None)
    d = _json(capsys, "analyze", launched)
    assert d["evidence"]["expected_bubble_ratio"] == pytest.approx(3 / 11, abs=1e-3)
    assert d["engine"]["training"]["micro_batches"] == 8
