"""A report file for an incident ticket: stage timeline, per-GPU power and SM activity,
the evidence and the recommendations, as one PNG or one self-contained HTML page.

matplotlib is an optional dependency (`pip install bubblewatch[report]`); it is
imported only when a report is written, through the object API (no pyplot
state), with the Agg renderer.

This module writes the files and builds the HTML page; the picture is drawn
in `_report_figure` from the binned numbers of `_report_grid`.
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from bubblewatch.detect.segments import Phases
from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.recording import Recording
from bubblewatch.sinks._report_figure import (
    VERDICT_COLOURS,
    png_bytes,
    render_figure,
)

__all__ = ["RecommendationLike", "render_html", "write_html_report", "write_png_report"]


class RecommendationLike(Protocol):
    """What the report needs of a recommendation (rules.Recommendation fits)."""

    def to_dict(self) -> dict[str, Any]: ...


def write_png_report(
    path: str | os.PathLike[str],
    recording: Recording,
    diagnosis: Diagnosis,
    recommendations: Sequence[RecommendationLike] = (),
    *,
    title: str | None = None,
    phases: Phases | None = None,
) -> None:
    """The report's picture as a PNG file (recommendations are listed only in HTML)."""
    del recommendations  # a picture has no room for copy-pasteable commands
    data = png_bytes(render_figure(recording, diagnosis, title=title, phases=phases))
    with open(path, "wb") as f:
        f.write(data)


# -- the page ---------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:2em auto;
color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}.verdict{display:inline-block;padding:.2em .6em;
border-radius:.3em;color:#fff;font-weight:600}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.9em}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:.85em}img{max-width:100%}
.muted{color:#666;font-size:.85em}.rec{border-left:4px solid #1565c0;padding:.2em 1em;
margin:1em 0}.rec.critical{border-color:#c62828}.rec.warning{border-color:#ef6c00}
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "n/a"
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v) or "none"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) or "none"
    return str(v)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls}>{html.escape(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _recommendation_html(rec: Mapping[str, Any]) -> str:
    sev = str(rec.get("severity", "info"))
    parts = [
        f'<div class="rec {html.escape(sev)}"><p><b>{html.escape(str(rec.get("summary", "")))}'
        f"</b> <span class=muted>({html.escape(sev)}, rule {html.escape(str(rec.get('rule', '')))})"
        "</span></p>"
    ]
    if rec.get("description"):
        parts.append(f"<p>{html.escape(str(rec['description']))}</p>")
    gain = rec.get("expected_gain")
    if isinstance(gain, dict) and (gain.get("text") or gain.get("factor")):
        text = gain.get("text") or f"{gain.get('metric')} x{gain.get('factor')}"
        parts.append(f"<p>Expected gain: {html.escape(str(text))}</p>")
    if rec.get("command"):
        parts.append(f"<pre>{html.escape(str(rec['command']))}</pre>")
    if rec.get("diff"):
        parts.append(f"<pre>{html.escape(str(rec['diff']))}</pre>")
    parts.append("</div>")
    return "".join(parts)


def render_html(
    recording: Recording,
    diagnosis: Diagnosis,
    recommendations: Sequence[RecommendationLike] = (),
    *,
    title: str | None = None,
    phases: Phases | None = None,
) -> str:
    """The whole report as one HTML page with the picture embedded (no external files)."""
    fig = render_figure(recording, diagnosis, title=title, phases=phases)
    png = base64.b64encode(png_bytes(fig)).decode()
    verdict = diagnosis.verdict.value
    head = html.escape(title or "bubblewatch report")
    when = (
        datetime.fromtimestamp(recording.start_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        if math.isfinite(recording.start_s)
        else "unknown time"
    )
    source = recording.meta.get("source", "trace") if isinstance(recording.meta, Mapping) else ""
    out = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{head}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{head}</h1>",
        f'<p><span class="verdict" style="background:{VERDICT_COLOURS.get(verdict, "#444")}">'
        f"{html.escape(verdict)}</span> confidence {diagnosis.confidence:.2f}",
    ]
    job = diagnosis.evidence.get("job")
    if job:
        out.append(f" &middot; job: {html.escape(str(job))}")
    if diagnosis.load_limited is not None:
        out.append(
            " &middot; load-limited (too little work to fill the pipeline)"
            if diagnosis.load_limited
            else " &middot; not load-limited (configuration problem)"
        )
    out.append(
        f'</p><p class="muted">{len(recording.gpus)} GPUs, {diagnosis.window_s:.1f} s from '
        f"{html.escape(when)}, {diagnosis.n_samples} samples, "
        f"source: {html.escape(str(source))}</p>"
    )
    for f in diagnosis.findings:
        out.append(f"<p>{html.escape(f.summary)}</p>")
    out.append(
        f'<img alt="stage timeline and per-GPU telemetry" src="data:image/png;base64,{png}">'
    )
    out.append("<h2>Recommendations</h2>")
    recs = [r.to_dict() for r in recommendations]
    if recs:
        out.extend(_recommendation_html(r) for r in recs)
    else:
        out.append("<p class=muted>No rule fired.</p>")
    out.append("<h2>Evidence</h2>")
    out.append(
        _table([{"key": k, "value": v} for k, v in diagnosis.evidence.items()], ["key", "value"])
    )
    if diagnosis.stages:
        out.append("<h2>Stages</h2>")
        rows = [s.to_dict() for s in diagnosis.stages]
        out.append(_table(rows, list(rows[0].keys())))
    if len(diagnosis.findings) > 1:
        out.append("<h2>Findings</h2>")
        out.append(
            _table(
                [
                    {
                        "verdict": f.verdict.value,
                        "confidence": round(f.confidence, 3),
                        "stage": f.stage,
                        "gpu": f.gpu,
                        "summary": f.summary,
                    }
                    for f in diagnosis.findings
                ],
                ["verdict", "confidence", "stage", "gpu", "summary"],
            )
        )
    out.append("<h2>GPUs</h2>")
    out.append(
        _table(
            [
                {"gpu": g.index, "name": g.name, "uuid": g.uuid, "host": g.host}
                for g in recording.gpus
            ],
            ["gpu", "name", "uuid", "host"],
        )
    )
    out.append('<p class="muted">Written by bubblewatch.</p></body></html>')
    return "\n".join(out)


def write_html_report(
    path: str | os.PathLike[str],
    recording: Recording,
    diagnosis: Diagnosis,
    recommendations: Sequence[RecommendationLike] = (),
    *,
    title: str | None = None,
    phases: Phases | None = None,
) -> None:
    """Write the self-contained HTML report (picture embedded as base64 PNG)."""
    text = render_html(recording, diagnosis, recommendations, title=title, phases=phases)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
