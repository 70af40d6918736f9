"""One story per window in the text, JSON and picture; pictures people read.

Pins down issue 19: a data-parallel checkpoint stall read `not_pipeline` at the
top while its first recommendation acted on a collective wait; "PP 1 x TP 8" and
"bubble ratio 79%" for a job with no pipeline; one "stage 0" row for 8 GPUs;
an empty "not recorded" panel; recommendation lines of 256 characters.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.detect import diagnose
from bubblewatch.detect.segments import phases
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sinks.report import wait_events, wrap_recommendations

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def stall_trace(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("story") / "dp.jsonl"
    assert main(["simulate", "dp8-checkpoint-stall", "--duration", "60", "-o", str(path)]) == 0
    return str(path)


@pytest.fixture(scope="module")
def long_stall_trace(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("story") / "dp-long.jsonl"
    assert main(["simulate", "dp8-checkpoint-stall", "--duration", "150", "-o", str(path)]) == 0
    return str(path)


def _text(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(["analyze", *argv]) == 0
    return capsys.readouterr().out


def test_text_tells_one_story_for_a_data_parallel_stall(capsys, stall_trace) -> None:
    out = _text(capsys, stall_trace)
    lines = out.splitlines()
    assert lines[0].startswith("verdict: collective_wait")
    assert lines[1].startswith("  job: data- or tensor-parallel") and "8 GPUs" in lines[1]
    assert "PP 1" not in out and "bubble ratio" not in out
    assert re.search(r"time waiting in collectives\s+\d+% in \d+ wait\(s\)", out)
    # the first recommendation acts on what the headline names
    recs = out[out.index("Recommendations:") :]
    assert recs.index("(CollectiveWait)") < recs.index("2. [")
    # every wait counted and the longest listed with start, length and energy
    count = int(re.search(r"collective waits: (\d+)", out).group(1))  # type: ignore[union-attr]
    assert count >= 10
    assert re.search(r"^\s+\d+\.\d s\s+\d+\.\d s\s+\d+ J$", out, re.M)
    # one row per GPU, the holding GPU named, the waits marked under the picture
    assert re.search(r"^  GPU 0 holds +│", out, re.M)
    assert len(re.findall(r"^  GPU \d waits +│", out, re.M)) == 7
    waits = re.search(r"^  waits +│([ W]+)│$", out, re.M)
    assert waits is not None and "W" in waits.group(1)


def test_recommendations_fit_100_columns_when_piped(capsys, stall_trace) -> None:
    out = _text(capsys, stall_trace)
    recs = out[out.index("Recommendations:") :].splitlines()
    assert max(len(line) for line in recs) <= 100
    assert any(line.startswith("         ") for line in recs)  # a note's continuation


def test_wrapping_leaves_commands_whole() -> None:
    cmd = "     python -m sglang.launch_server " + "--flag value " * 20
    text = "\n".join(
        ["1. [WARNING] " + "word " * 40 + " (Rule)", "   corrected command line:", cmd]
    )
    out = wrap_recommendations(text, 60).splitlines()
    assert out[-1] == cmd
    assert all(len(line) <= 60 for line in out[:-2])
    assert out[1].startswith("   word")  # hangs under the summary, not under the number


def test_json_has_the_events_and_the_same_story(capsys, stall_trace) -> None:
    capsys.readouterr()
    assert main(["analyze", stall_trace, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "collective_wait"
    assert out["recommendations"][0]["rule"] == "CollectiveWait"
    ev = out["findings"][0]["evidence"]
    assert ev["event_count"] == out["evidence"]["collective_wait_event_count"]
    assert all({"start", "offset_s", "duration_s", "energy_j"} <= set(e) for e in ev["events"])
    assert out["evidence"]["job_shape"] == "in_phase"


def test_a_long_recording_puts_the_headline_first_and_its_phases_agree(
    capsys, long_stall_trace
) -> None:
    out = _text(capsys, long_stall_trace, "--window-samples", "1000")
    lines = out.splitlines()
    assert lines[0].startswith("verdict: collective_wait")
    assert any(line.startswith("  long recording:") for line in lines[:6])
    capsys.readouterr()
    assert main(["analyze", long_stall_trace, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["dominant_verdict"] == whole["verdict"] == "collective_wait"


def _stall_recording(interval_s: float = 1.0, duration_s: float = 60.0):
    rec = observe(
        simulate(load_scenario("dp8-checkpoint-stall"), duration_s=duration_s, seed=0),
        interval_s,
    )
    return rec, diagnose(rec)


def _axes_titled(fig, word: str):
    return [ax for ax in fig.axes if word in ax.get_title()]


def test_picture_has_a_row_per_gpu_marked_waits_and_phases() -> None:
    from bubblewatch.sinks._report_figure import render_figure

    rec, d = _stall_recording(duration_s=90.0)
    fig = render_figure(rec, d, phases=phases(rec))
    (timeline,) = _axes_titled(fig, "Timeline")
    names = [t.get_text() for t in timeline.get_yticklabels()]
    assert names[0] == "GPU 0 holds" and names[1:] == [f"GPU {g} waits" for g in range(1, 8)]
    assert "kernel busy" in timeline.get_title()  # the holder idles while the others spin
    _, listed = wait_events(d)
    plots = [ax for ax in _axes_titled(fig, "per GPU (") if ax is not timeline]
    assert len(plots) == 2
    for ax in plots:
        bands = [p for p in ax.patches if p.get_gid() == "collective_wait"]
        assert len(bands) == len(listed) > 0
    (band,) = _axes_titled(fig, "Phases")
    assert any(p.get_gid() == "phase" for p in band.patches)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "collective_wait" in texts and "not recorded" not in texts


def test_a_panel_with_nothing_recorded_is_left_out() -> None:
    from bubblewatch.sinks._report_figure import render_figure

    rec, d = _stall_recording()

    def no_sm_of(s: GpuSeries) -> GpuSeries:
        kept = {m: v for m, v in s.values.items() if m is not Metric.SM_ACTIVE_RATIO}
        return GpuSeries(s.gpu, s.t_s, kept)

    no_sm = replace(rec, series={g: no_sm_of(s) for g, s in rec.series.items()})
    with_sm = render_figure(rec, d)
    without = render_figure(no_sm, diagnose(no_sm))
    assert _axes_titled(with_sm, "SM activity per GPU")
    assert not _axes_titled(without, "SM activity per GPU")
    assert len(without.axes) == len(with_sm.axes) - 1
    texts = [t.get_text() for ax in without.axes for t in ax.texts]
    assert "not recorded" not in texts


def test_fine_samples_are_drawn_as_an_envelope() -> None:
    from bubblewatch.sinks._report_figure import render_figure

    fine, d_fine = _stall_recording(interval_s=0.1, duration_s=150.0)
    coarse, d_coarse = _stall_recording(interval_s=1.0)
    (power,) = _axes_titled(render_figure(fine, d_fine), "Power per GPU")
    envelopes = [c for c in power.collections if c.get_gid() == "envelope"]
    assert len(envelopes) == 8
    # the band spans each column's range: its top is at least the mean line's
    top = np.nanmax(envelopes[0].get_paths()[0].vertices[:, 1])
    assert top >= np.nanmax(power.lines[0].get_ydata())
    (power1,) = _axes_titled(render_figure(coarse, d_coarse), "Power per GPU")
    assert not [c for c in power1.collections if c.get_gid() == "envelope"]


def test_png_and_html_reports_from_the_cli(capsys, stall_trace, tmp_path: Path) -> None:
    png, page = tmp_path / "r.png", tmp_path / "r.html"
    _text(capsys, stall_trace, "--png", str(png), "--html", str(page))
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "job: data- or tensor-parallel (or FSDP): 8 GPUs" in page.read_text(encoding="utf-8")


def test_a_hang_is_one_wait_still_going_at_the_end(capsys, tmp_path: Path) -> None:
    path = tmp_path / "hang.jsonl"
    assert main(["simulate", "dp8-hang", "--duration", "60", "-o", str(path)]) == 0
    out = _text(capsys, str(path))
    assert out.startswith("verdict: collective_wait")
    assert "collective waits: 1\n" in out
    assert re.search(
        r"^\s+1\d\.\d s\s+4\d\.\d s\s+\d+ J  still going at the window's end$", out, re.M
    )
    assert re.search(r"^  GPU 5 holds +│", out, re.M)
