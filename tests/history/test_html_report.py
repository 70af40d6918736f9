"""The HTML and PNG report: self-contained, readable, escaped."""

from __future__ import annotations

import base64
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from bubblewatch.detect import diagnose
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sinks._report_figure import ReportError
from bubblewatch.sinks.html_report import render_html, write_html_report, write_png_report
from bubblewatch.sources.kineto import load_kineto

from .kineto_gen import PipelineSpec, write_pipeline_traces

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class FakeRec:
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data


RECS = [
    FakeRec(
        {
            "rule": "PipelineSerializedUnderLoad",
            "severity": "critical",
            "summary": "Pipeline runs serialized <script>alert(1)</script>",
            "description": "one micro-batch in flight",
            "expected_gain": {"metric": "throughput", "factor": 3.9, "text": "x3.9 tokens/s"},
            "command": "python -m sglang.launch_server --pp-size 4 --pp-async-batch-depth 4",
            "diff": None,
        }
    )
]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(PNG_MAGIC)
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)


@pytest.fixture(scope="module")
def kineto_case(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("k")
    write_pipeline_traces(d, PipelineSpec(pp=4, in_flight=1, duration_s=11.0))
    rec = load_kineto(d)
    return rec, diagnose(rec)


def test_html_is_self_contained_and_escaped(kineto_case, tmp_path):
    rec, diag = kineto_case
    path = tmp_path / "report.html"
    write_html_report(path, rec, diag, RECS, title="PP4 <incident>")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>")
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "PP4 &lt;incident&gt;" in text
    assert "--pp-async-batch-depth 4" in text and "x3.9 tokens/s" in text
    assert diag.verdict.value in text
    for key in ("concurrency", "bubble_ratio"):
        assert f"<td>{key}</td>" in text
    # One image, embedded; nothing fetched from elsewhere.
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 1
    w, h = _png_size(base64.b64decode(images[0]))
    assert (w, h) == (1200, 1100)  # the zoomed stage timeline is there for fine data
    assert not re.search(r'(src|href)="(https?:)?//', text)


def test_png_of_a_simulated_pipeline_with_power(tmp_path):
    rec = observe(simulate(load_scenario("pp8-serialized"), duration_s=15, seed=0), interval_s=0.5)
    diag = diagnose(rec)
    path = tmp_path / "r.png"
    write_png_report(path, rec, diag)
    assert _png_size(path.read_bytes()) == (1200, 1000)
    html = render_html(rec, diag, [])
    assert "No rule fired." in html and "Power per GPU" not in html  # the title is in the PNG
    assert "RTX PRO 6000" in html


def test_missing_matplotlib_is_a_clear_error(kineto_case, tmp_path, monkeypatch):
    rec, diag = kineto_case
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ReportError, match=r"pip install 'bubblewatch\[report\]'"):
        write_png_report(tmp_path / "x.png", rec, diag)
