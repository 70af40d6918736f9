"""`bubblewatch analyze`: JSON contract, human report with the stage picture, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.detect.activity import stage_activity
from bubblewatch.sinks.report import SHADES, shade_row
from bubblewatch.sources.trace import write_trace

from .synth import make_recording


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for name, kw in {
        "serialized": {"mode": "serialized", "pp": 4, "interval_s": 0.2},
        "idle": {"mode": "idle", "pp": 4, "running": 0, "queued": 0},
        "healthy": {"mode": "pipelined", "pp": 4, "k": 8},
        "untopo": {"mode": "serialized", "pp": 4, "topology": False, "interval_s": 0.2},
    }.items():
        path = d / f"{name}.jsonl"
        write_trace(path, make_recording(**kw))
        out[name] = str(path)
    return out


def _json(capsys, *argv):
    rc = main(["analyze", *argv, "--json"])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out)


@pytest.mark.parametrize(
    ("name", "verdict"), [("serialized", "serialized"), ("idle", "idle"), ("healthy", "healthy")]
)
def test_json_output_and_exit_zero_whatever_the_verdict(capsys, traces, name, verdict):
    rc, out = _json(capsys, traces[name])
    assert rc == 0
    assert out["verdict"] == verdict
    for key in ("confidence", "findings", "stages", "evidence", "load_limited", "recommendations"):
        assert key in out
    assert isinstance(out["recommendations"], list)
    assert all({"rule", "severity", "summary", "fix"} <= set(r) for r in out["recommendations"])
    assert all({"verdict", "confidence", "evidence"} <= set(f) for f in out["findings"])
    assert [s["stage"] for s in out["stages"]] == [0, 1, 2, 3]


def test_pp_and_tp_sizes_define_stages(capsys, traces):
    rc, out = _json(capsys, traces["untopo"], "--pp-size", "2", "--tp-size", "2")
    assert rc == 0
    assert [s["gpus"] for s in out["stages"]] == [[0, 1], [2, 3]]
    assert out["evidence"]["topology_source"] == "given"


def test_engine_cmdline_sets_topology_and_never_echoes_secrets(capsys, traces):
    cmd = (
        "python -m sglang.launch_server --model-path m --pp-size 4 "
        "--api-key sk-verysecretvalue123456 --port 30000"
    )
    rc = main(["analyze", traces["untopo"], "--engine-cmdline", cmd, "--json"])
    text = capsys.readouterr().out
    assert rc == 0
    out = json.loads(text)
    assert len(out["stages"]) == 4
    assert out["topology"]["source"] == "cmdline"
    assert "sk-verysecretvalue123456" not in text


def test_human_report_shows_verdict_evidence_and_picture(capsys, traces):
    rc = main(["analyze", traces["serialized"]])
    text = capsys.readouterr().out
    assert rc == 0
    assert text.startswith("verdict: serialized")
    assert "concurrency (sum of stage occupancy)" in text
    assert "stage activity over the window:" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("  stage ") and "│" in ln]
    assert len(rows) == 4
    assert "\x1b[" not in text  # not a TTY: no colour
    assert "Recommendations:" in text or "No recommendations." in text


def test_colour_on_request(capsys, traces):
    main(["analyze", traces["idle"], "--color", "always"])
    assert "\x1b[" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/nonexistent/trace.jsonl"], "/nonexistent/trace.jsonl"),
        (["{serialized}", "--pp-size", "8"], "does not have"),
        (["{serialized}", "--pp-size", "0"], "pp_size"),
        (["{serialized}", "--last", "-1"], "--last must be > 0"),
        (["{serialized}", "--engine-cmdline", "python train.py"], "not an SGLang"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(capsys, traces, argv, message):
    argv = [a.format(**traces) for a in argv]
    rc = main(["analyze", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err


def test_bad_topology_file(capsys, traces, tmp_path):
    bad = tmp_path / "topo.yaml"
    bad.write_text("stages: [[0, 1], [1, 2]]\n")
    rc = main(["analyze", traces["serialized"], "--topology", str(bad)])
    assert rc == 2
    assert str(bad) in capsys.readouterr().err


def test_shades_follow_occupancy_bands():
    row = shade_row(np.array([0.0, 0.1, 0.3, 0.6, 0.9, np.nan]))
    assert row == " " + SHADES[1] + SHADES[2] + SHADES[3] + SHADES[4] + "·"


def test_activity_picture_shows_the_stagger():
    # At 100 ms sampling, the prefill wave is busiest on stage s one stage-time after s-1.
    rec = make_recording("serialized", pp=4, interval_s=0.1, duration_s=30.0)
    act = stage_activity(rec, ((0,), (1,), (2,), (3,)), columns=1000)
    # Never more columns than samples (299 at 10 Hz over 30 s): no empty cells.
    assert act is not None and act.ratio.shape == (4, 299)
    assert np.isfinite(act.ratio).all()
    first_busy = [int(np.argmax(row > 0.5)) for row in act.ratio]
    assert first_busy == sorted(first_busy) and first_busy[0] < first_busy[-1]
