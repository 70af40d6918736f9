"""`analyze` of a recording longer than one window: window by window, the same phases as whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.detect.long import analyse_windows
from bubblewatch.detect.segments import change_points
from bubblewatch.sources.stream import windows
from bubblewatch.sources.trace import write_trace

from .test_phases import T0, _loading_training_idle


def _analyze(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["analyze", "--json", *argv]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def _phases(out: dict[str, object]) -> list[tuple[float, float, str, str | None]]:
    segs = out["segments"]
    assert isinstance(segs, list)
    return [(s["start_offset_s"], s["end_offset_s"], s["verdict"], s.get("label")) for s in segs]


def test_windows_give_the_phases_the_whole_recording_gives(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())  # 4320 samples
    whole = _analyze(capsys, str(path))
    long = _analyze(capsys, str(path), "--window-samples", "1000", "--window", "30")
    assert "recording" not in whole
    assert _phases(long) == _phases(whole)
    assert _phases(long) == [
        (0.0, 60.0, "idle", "loading"),
        (60.0, 180.0, "not_pipeline", "steady"),
        (180.0, 269.5, "idle", "steady"),
    ]
    assert long["dominant_verdict"] == whole["dominant_verdict"] == "idle"
    rec = long["recording"]
    assert isinstance(rec, dict)
    wins = rec["windows"]
    assert rec["n_samples"] == 4320 == sum(w["n_samples"] for w in wins)
    assert all(w["end"] - w["start"] < 30.0 for w in wins)
    assert rec["headline_window"]["verdict"] == long["verdict"] == "idle"


def test_phase_features_gathered_window_by_window_cut_where_the_whole_does() -> None:
    rec = _loading_training_idle()
    gpus = tuple(range(8))
    pieces = iter([rec.window(T0 + a, T0 + a + 47.5) for a in np.arange(0, 300, 47.5)])
    result = analyse_windows(
        windows(pieces, length_s=25.0, max_samples=10_000), lambda w: None, min_segment_s=30.0
    )
    assert result is not None
    cuts = [s.start_s for s in result.phases.segments[1:]]
    assert cuts == pytest.approx(change_points(rec, gpus), abs=1e-6)


def test_last_seconds_of_a_long_recording_are_analysed_whole(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())
    whole = _analyze(capsys, str(path), "--last", "100")
    long = _analyze(capsys, str(path), "--last", "100", "--window-samples", "2000")
    assert "recording" not in long  # the last 100 s hold 1600 samples: whole, as before
    assert (long["verdict"], long["n_samples"]) == (whole["verdict"], whole["n_samples"])


def test_a_directory_of_parts_is_analysed_window_by_window(tmp_path: Path, capsys) -> None:
    rec = _loading_training_idle()
    d = tmp_path / "parts"
    d.mkdir()
    for k, a in enumerate(range(0, 270, 90)):
        write_trace(d / f"p{k}.jsonl.gz", rec.window(T0 + a, T0 + a + 90))
    whole = _analyze(capsys, str(d))
    long = _analyze(capsys, str(d), "--window-samples", "1000", "--window", "30")
    assert _phases(long) == _phases(whole)
    rec_out = long["recording"]
    assert isinstance(rec_out, dict) and rec_out["n_samples"] == 4320


def test_text_report_says_it_was_analysed_in_windows(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())
    assert main(["analyze", str(path), "--window-samples", "1000", "--window", "30"]) == 0
    out = capsys.readouterr().out
    assert "verdict: idle" in out and "long recording: 4,320 samples in 9 windows" in out


def test_bad_window_options_are_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())
    assert main(["analyze", str(path), "--window", "0"]) == 2
    assert main(["analyze", str(path), "--window-samples", "10"]) == 2
    assert "--window-samples must be at least 1000" in capsys.readouterr().err


def test_report_files_of_a_long_recording_draw_its_headline_window(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _loading_training_idle())
    html = tmp_path / "r.html"
    argv = ["analyze", str(path), "--window-samples", "1000", "--window", "30", "--html", str(html)]
    assert main(argv) == 0
    assert html.stat().st_size > 1000 and "verdict: idle" in capsys.readouterr().out
