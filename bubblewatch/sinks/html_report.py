"""A report file for an incident ticket: stage timeline, per-GPU power and SM activity,
the evidence and the recommendations, as one PNG or one self-contained HTML page.

matplotlib is an optional dependency (`pip install bubblewatch[report]`); it is
imported only when a report is written, through the object API (no pyplot
state), with the Agg renderer.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FloatArray = npt.NDArray[np.float64]
_MAX_COLUMNS = 600
_ZOOM_COLUMNS = 120
_POWER = (Metric.POWER_INSTANT_W, Metric.POWER_AVG_W)
_VERDICT_COLOURS = {
    "healthy": "#2e7d32",
    "serialized": "#c62828",
    "launch_bound": "#ef6c00",
    "imbalanced": "#ef6c00",
    "straggler": "#ef6c00",
    "idle": "#546e7a",
    "not_pipeline": "#546e7a",
    "insufficient_data": "#546e7a",
}


class RecommendationLike(Protocol):
    """What the report needs of a recommendation (rules.Recommendation fits)."""

    def to_dict(self) -> dict[str, Any]: ...


class ReportError(RuntimeError):
    """The report cannot be drawn here (matplotlib missing)."""


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ReportError(
            "writing a --png or --html report needs matplotlib: "
            "pip install 'bubblewatch[report]' (or pip install matplotlib)"
        ) from e
    matplotlib.rcParams["svg.hashsalt"] = "bubblewatch"  # reproducible output
    return Figure


# -- the figure -------------------------------------------------------------------


def _stages(recording: Recording, diagnosis: Diagnosis) -> tuple[tuple[int, ...], ...]:
    if diagnosis.stages:
        return tuple(tuple(s.gpus) for s in diagnosis.stages)
    topo: Topology | None = recording.topology
    if topo is not None:
        return topo.stages
    return tuple((g,) for g in recording.gpu_indices)


def _activity(recording: Recording, gpu: int) -> tuple[FloatArray, FloatArray, str] | None:
    """(t, activity 0..1, what it is) for one GPU: SM activity, else power scaled to its range."""
    s = recording.series.get(gpu)
    if s is None or len(s) == 0:
        return None
    sm = s.get(Metric.SM_ACTIVE_RATIO)
    if sm is not None:
        return s.t_s, sm, "SM activity"
    for m in _POWER:
        p = s.get(m)
        if p is not None:
            lo, hi = np.nanpercentile(p, 2), np.nanpercentile(p, 98)
            return s.t_s, np.clip((p - lo) / max(hi - lo, 1e-9), 0, 1), "power (scaled)"
    kb = s.get(Metric.KERNEL_BUSY_RATIO)
    if kb is not None:
        return s.t_s, kb, "kernel busy"
    return None


def _binned(t: FloatArray, v: FloatArray, edges: FloatArray) -> FloatArray:
    """Mean of v in each [edges[i], edges[i+1]); NaN where a bin holds no value."""
    n = edges.size - 1
    col = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    ok = np.isfinite(v) & (t >= edges[0]) & (t <= edges[-1])
    total = np.bincount(col[ok], weights=v[ok], minlength=n)
    count = np.bincount(col[ok], minlength=n)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _heatmap(
    recording: Recording, stages: Sequence[Sequence[int]], edges: FloatArray
) -> tuple[FloatArray, str]:
    """Stage x bin matrix of mean activity (the GPUs of a stage averaged)."""
    grid = np.full((len(stages), edges.size - 1), np.nan)
    label = "activity"
    for i, gpus in enumerate(stages):
        rows = []
        for g in gpus:
            a = _activity(recording, g)
            if a is not None:
                t, v, label = a
                rows.append(_binned(t, v, edges))
        if rows:
            grid[i] = _nanmean_rows(np.vstack(rows))
    return grid, label


def _nanmean_rows(x: FloatArray) -> FloatArray:
    ok = np.isfinite(x)
    n = ok.sum(axis=0)
    s = np.where(ok, x, 0.0).sum(axis=0)
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def _native_step_s(recording: Recording) -> float:
    steps = [float(np.median(np.diff(s.t_s))) for s in recording.series.values() if len(s) > 1]
    return float(np.median(steps)) if steps else math.inf


def _draw_map(fig: Any, ax: Any, grid: FloatArray, span: tuple[float, float], title: str) -> None:
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad="#dddddd")
    n = grid.shape[0]
    img = ax.imshow(
        np.ma.masked_invalid(grid),
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        vmin=0.0,
        vmax=1.0,
        extent=(span[0], span[1], n - 0.5, -0.5),
    )
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"stage {i}" for i in range(n)], fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("seconds")
    fig.colorbar(img, ax=ax, fraction=0.025, pad=0.01)


def render_figure(
    recording: Recording, diagnosis: Diagnosis, *, title: str | None = None
) -> Figure:
    """The report's picture: stage timeline, power and SM activity per GPU, stage occupancy."""
    figure_cls = _matplotlib()
    from matplotlib import colormaps

    stages = _stages(recording, diagnosis)
    t0 = recording.start_s if math.isfinite(recording.start_s) else 0.0
    t1 = recording.end_s if math.isfinite(recording.end_s) else t0 + 1.0
    t1 = max(t1, t0 + 1e-3)
    step = _native_step_s(recording)
    n_cols = int(max(1, min(_MAX_COLUMNS, math.ceil((t1 - t0) / step) if step > 0 else 1)))
    edges = np.linspace(t0, t1, n_cols + 1)
    # Fine data (profiler traces) averaged to the page width hides the stagger: zoom in too.
    zoom = step > 0 and (t1 - t0) / step > 1.5 * _MAX_COLUMNS
    map_h = max(2, min(len(stages), 8)) * 0.45
    ratios = [map_h, *([map_h] if zoom else []), 2, 2, 1.6]
    fig: Figure = figure_cls(figsize=(12, 11 if zoom else 10), dpi=100, layout="constrained")
    axes = list(fig.subplots(len(ratios), 1, gridspec_kw={"height_ratios": ratios}))
    ax_map = axes.pop(0)
    ax_zoom = axes.pop(0) if zoom else None
    ax_pow, ax_sm, ax_occ = axes
    verdict = diagnosis.verdict.value
    ev = diagnosis.evidence
    conc, bubble = ev.get("concurrency"), ev.get("bubble_ratio")
    head = title or "bubblewatch report"
    sub = f"verdict: {verdict} (confidence {diagnosis.confidence:.2f})"
    if isinstance(conc, (int, float)):
        sub += f"   concurrency {conc:.2f} of {len(stages)} stages"
    if isinstance(bubble, (int, float)):
        sub += f"   bubble ratio {bubble:.0%}"
    fig.suptitle(f"{head}\n{sub}", fontsize=12, color=_VERDICT_COLOURS.get(verdict, "black"))

    grid, label = _heatmap(recording, stages, edges)
    _draw_map(
        fig, ax_map, grid, (0.0, t1 - t0), f"Stage timeline: {label} per stage (grey: no data)"
    )
    if ax_zoom is not None:
        z_edges: FloatArray = t0 + np.arange(_ZOOM_COLUMNS + 1, dtype=np.float64) * step
        z_grid, _ = _heatmap(recording, stages, z_edges)
        _draw_map(
            fig,
            ax_zoom,
            z_grid,
            (0.0, _ZOOM_COLUMNS * step),
            f"First {_ZOOM_COLUMNS * step:.3g} s at full resolution ({step * 1e3:.3g} ms bins)",
        )

    colours = colormaps["tab10" if len(recording.gpus) <= 10 else "turbo"]
    n = max(len(recording.gpus), 1)
    centres = (edges[:-1] + edges[1:]) / 2 - t0
    any_power = any(s.get(m) is not None for s in recording.series.values() for m in _POWER)
    second = (
        "Power per GPU (W)" if any_power else "Kernel busy per GPU (any kernel, NCCL waits too)"
    )
    drew = [False, False]
    for k, info in enumerate(recording.gpus):
        s = recording.series.get(info.index)
        if s is None or len(s) == 0:
            continue
        c = colours(k if n <= 10 else k / max(n - 1, 1))
        stage = next((i for i, st in enumerate(stages) if info.index in st), None)
        name = f"GPU {info.index}" + ("" if stage is None else f" (s{stage})")
        if info.host:
            name += f" {info.host}"
        if any_power:
            top = next((s.get(m) for m in _POWER if s.get(m) is not None), None)
        else:
            top = s.get(Metric.KERNEL_BUSY_RATIO)
        for j, (ax, v) in enumerate(((ax_pow, top), (ax_sm, s.get(Metric.SM_ACTIVE_RATIO)))):
            if v is not None:
                ax.plot(centres, _binned(s.t_s, v, edges), lw=0.9, color=c, label=name)
                drew[j] = True
    ax_pow.set_title(second, fontsize=10)
    ax_sm.set_title("SM activity per GPU (0..1)", fontsize=10)
    for ax, has in ((ax_pow, drew[0]), (ax_sm, drew[1])):
        ax.set_xlim(0, t1 - t0)
        ax.grid(alpha=0.3)
        if has:
            ax.legend(fontsize=7, ncol=min(8, n), loc="upper right")
        else:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
    ax_sm.set_ylim(0, 1.05)
    ax_sm.set_xlabel("seconds")

    occ = [s.occupancy_ratio for s in diagnosis.stages]
    xs = np.arange(len(occ))
    ax_occ.bar(xs, [0.0 if not math.isfinite(v) else v for v in occ], color="#1565c0")
    ax_occ.set_xticks(xs)
    ax_occ.set_xticklabels([f"stage {s.stage}" for s in diagnosis.stages], fontsize=8)
    ax_occ.set_ylim(0, 1.05)
    ax_occ.set_title("Stage occupancy (share of time doing useful work)", fontsize=10)
    ax_occ.grid(axis="y", alpha=0.3)
    if not occ:
        ax_occ.text(0.5, 0.5, "no stage statistics", ha="center", va="center",
                    transform=ax_occ.transAxes)  # fmt: skip
    return fig


def _png_bytes(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": "bubblewatch"})
    return buf.getvalue()


def write_png_report(
    path: str | os.PathLike[str],
    recording: Recording,
    diagnosis: Diagnosis,
    recommendations: Sequence[RecommendationLike] = (),
    *,
    title: str | None = None,
) -> None:
    """The report's picture as a PNG file (recommendations are listed only in HTML)."""
    del recommendations  # a picture has no room for copy-pasteable commands
    data = _png_bytes(render_figure(recording, diagnosis, title=title))
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
) -> str:
    """The whole report as one HTML page with the picture embedded (no external files)."""
    png = base64.b64encode(_png_bytes(render_figure(recording, diagnosis, title=title))).decode()
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
        f'<p><span class="verdict" style="background:{_VERDICT_COLOURS.get(verdict, "#444")}">'
        f"{html.escape(verdict)}</span> confidence {diagnosis.confidence:.2f}",
    ]
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
) -> None:
    """Write the self-contained HTML report (picture embedded as base64 PNG)."""
    text = render_html(recording, diagnosis, recommendations, title=title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
