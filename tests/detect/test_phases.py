"""Phases of a long recording (JSON `segments`, dominant verdict, picture); schedule options."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.detect import Verdict
from bubblewatch.detect.segments import change_points, phases
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import recording_from_arrays
from bubblewatch.model.samples import Event
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sources.trace import write_trace

T0 = 1_775_000_000.0


def _loading_training_idle():
    """8 GPUs: 60 s loading (no kernels, 120 W), 120 s DDP work in phase, 90 s idle tail."""
    rng = np.random.default_rng(0)
    t = np.arange(0, 270, 0.5)
    work = (t >= 60) & (t < 180)
    common = rng.normal(0, 0.03, t.size)
    kb = np.where(work, 0.97, 0.0)[None, :] + np.zeros((8, 1))
    sm = np.where(work, 0.8 + common, 0.0)[None, :] + rng.normal(0, 0.01, (8, t.size)) * work
    power = np.where(work, 600 + 200 * common, 120.0)[None, :] + rng.normal(0, 2, (8, t.size))
    rec = recording_from_arrays(
        T0 + t,
        {
            Metric.KERNEL_BUSY_RATIO: kb,
            Metric.SM_ACTIVE_RATIO: np.clip(sm, 0, 1),
            Metric.POWER_AVG_W: power,
        },
        gpus=[GpuInfo(index=i, name="NVIDIA H100 80GB HBM3") for i in range(8)],
    )
    marks = (Event(T0, "annotation", None, {"column": "phase", "value": "loading"}),)
    marks += (Event(T0 + 60, "annotation", None, {"column": "phase", "value": "steady"}),)
    return replace(rec, events=marks)


def test_phases_split_where_behaviour_changes_and_say_what_dominates() -> None:
    rec = _loading_training_idle()
    cuts = change_points(rec, tuple(range(8)))
    assert [round(c - T0) for c in cuts] == [60, 180]
    ph = phases(rec)
    assert [s.verdict for s in ph.segments] == [Verdict.IDLE, Verdict.NOT_PIPELINE, Verdict.IDLE]
    assert ph.segments[1].start_s == pytest.approx(T0 + 60, abs=1)
    assert ph.dominant is Verdict.IDLE  # 150 s idle against 120 s of work
    assert [s.label for s in ph.segments] == ["loading", "steady", "steady"]
    d = ph.to_dict()
    assert d["segments"][1]["verdict"] == "not_pipeline" and d["segments"][0]["start_offset_s"] == 0


def test_steady_recording_is_one_phase() -> None:
    res = simulate(load_scenario("dp8-training"), duration_s=90.0, seed=0)
    ph = phases(observe(res, interval_s=0.5))
    assert len(ph.segments) == 1 and ph.dominant is Verdict.NOT_PIPELINE


def test_analyze_reports_phases_in_json_and_picture(tmp_path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())
    assert main(["analyze", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["verdict"] for s in out["segments"]] == ["idle", "not_pipeline", "idle"]
    assert set(out["segments"][0]) >= {"start", "end", "verdict", "confidence"}
    assert out["dominant_verdict"] == "idle"
    assert main(["analyze", str(path), "--color", "never"]) == 0
    text = capsys.readouterr().out
    assert "phases (dominant: idle):" in text
    row = next(line for line in text.splitlines() if line.startswith("  phases   │"))
    assert "i" in row and "n" in row and row.index("i") < row.index("n")
    assert "n not_pipeline" in text


def test_short_recordings_have_no_phases(tmp_path, capsys) -> None:
    res = simulate(load_scenario("dp8-training"), duration_s=30.0, seed=0)
    path = tmp_path / "short.jsonl"
    write_trace(path, observe(res, interval_s=0.5))
    assert main(["analyze", str(path), "--json"]) == 0
    assert "segments" not in json.loads(capsys.readouterr().out)


def test_schedule_options_judge_a_training_pipeline(tmp_path, capsys) -> None:
    res = simulate(load_scenario("pp2x8-gpipe"), duration_s=30.0, seed=0)
    path = tmp_path / "gpipe.jsonl"
    write_trace(path, observe(res, interval_s=0.1))
    argv = ["analyze", str(path), "--json", "--schedule", "gpipe", "--micro-batches", "4"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "healthy"
    assert out["evidence"]["expected_bubble_ratio"] == pytest.approx(0.2)
    assert 0.8 <= out["evidence"]["schedule_efficiency_ratio"] <= 1.1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--schedule", "gpipe"], "give --schedule and --micro-batches together"),
        (["--micro-batches", "4"], "give --schedule and --micro-batches together"),
        (["--schedule", "gpipe", "--micro-batches", "0"], "micro_batches must be >= 1"),
    ],
)
def test_schedule_option_errors_exit_2(tmp_path, capsys, extra, message) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())
    assert main(["analyze", str(path), *extra]) == 2
    assert message in capsys.readouterr().err
