"""Draw the report's picture with matplotlib: timeline, phases, power and SM activity, occupancy.

matplotlib is an optional dependency (`pip install bubblewatch[report]`); it is
imported only when a figure is drawn, through the object API (no pyplot
state), with the Agg renderer. Missing, it is a `ReportError` that says how
to install it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bubblewatch.detect.segments import Phases
from bubblewatch.detect.shape import is_pipeline
from bubblewatch.detect.types import Diagnosis
from bubblewatch.errors import UnavailableError
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.sinks._report_grid import (
    POWER,
    FloatArray,
    binned,
    binned_range,
    heatmap,
    native_step_s,
    report_stages,
)
from bubblewatch.sinks.report import wait_events

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_MAX_COLUMNS = 600
_ZOOM_COLUMNS = 120
_ENVELOPE_COLUMNS = 150  # line plots of fine data: columns wide enough to span a few steps
VERDICT_COLOURS = {
    "healthy": "#2e7d32",
    "serialized": "#c62828",
    "launch_bound": "#ef6c00",
    "imbalanced": "#ef6c00",
    "straggler": "#ef6c00",
    "idle": "#546e7a",
    "not_pipeline": "#546e7a",
    "insufficient_data": "#546e7a",
    "collective_wait": "#c62828",
    "underfed": "#ef6c00",
    "below_schedule": "#ef6c00",
}


class ReportError(UnavailableError, RuntimeError):
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


def _draw_map(
    fig: Any,
    ax: Any,
    grid: FloatArray,
    span: tuple[float, float],
    title: str,
    *,
    names: Sequence[str],
) -> None:
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
    ax.set_yticklabels(list(names), fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("seconds")
    fig.colorbar(img, ax=ax, fraction=0.025, pad=0.01)


def _row_names(diagnosis: Diagnosis, rows: Sequence[Sequence[int]], pipeline: bool) -> list[str]:
    """`stage N` for a pipeline's rows; `GPU g`, with its part in a collective wait, else."""
    if pipeline:
        return [f"stage {i}" for i in range(len(rows))]
    ev = diagnosis.evidence
    role: dict[int, str] = {}
    for key, word in (("holding_gpus", " holds"), ("waiting_gpus", " waits")):
        v = ev.get(key)
        role.update({g: word for g in v if isinstance(g, int)} if isinstance(v, list) else {})
    return [f"GPU {','.join(str(g) for g in r)}{role.get(r[0], '')}" for r in rows]


def _mark_events(axes: Sequence[Any], diagnosis: Diagnosis, t0: float) -> None:
    """Each collective wait as a red band on the line plots (gid `collective_wait`)."""
    _, events = wait_events(diagnosis)
    for ax in axes:
        for k, e in enumerate(events):
            a = float(e["start"]) - t0
            label = "collective wait" if k == 0 else None
            ax.axvspan(a, a + float(e["duration_s"]), color="#c62828", alpha=0.18, lw=0,
                       gid="collective_wait", label=label)  # fmt: skip


def _draw_phases(ax: Any, phases: Phases, t0: float, t1: float) -> None:
    """The phases as coloured bands, each named by its verdict (gid `phase`)."""
    for seg in phases.segments:
        a, b = max(seg.start_s, t0) - t0, min(seg.end_s, t1) - t0
        if b <= a:
            continue
        colour = VERDICT_COLOURS.get(seg.verdict.value, "#546e7a")
        ax.axvspan(a, b, color=colour, alpha=0.55, lw=0, gid="phase")
        ax.text((a + b) / 2, 0.5, seg.verdict.value, ha="center", va="center", fontsize=8,
                clip_on=True)  # fmt: skip
    ax.set_xlim(0, t1 - t0)
    ax.set_yticks([])
    ax.set_title("Phases (the verdict of each part of the recording)", fontsize=10)


def _plot_series(
    ax: Any, t: FloatArray, v: FloatArray, edges: FloatArray, centres: FloatArray, **kw: Any
) -> bool:
    """The mean per column; where samples outnumber the columns, coarser columns and a band
    from each one's minimum to its maximum (an envelope: peaks and stalls stay visible)."""
    if t.size <= 2 * _ENVELOPE_COLUMNS:
        ax.plot(centres, binned(t, v, edges), lw=0.9, **kw)
        return False
    wide = np.linspace(edges[0], edges[-1], _ENVELOPE_COLUMNS + 1)
    mid = (wide[:-1] + wide[1:]) / 2 - edges[0]
    ax.plot(mid, binned(t, v, wide), lw=0.9, **kw)
    lo, hi = binned_range(t, v, wide)
    ax.fill_between(mid, lo, hi, color=kw.get("color"), alpha=0.15, lw=0, gid="envelope")
    return True


def render_figure(
    recording: Recording,
    diagnosis: Diagnosis,
    *,
    title: str | None = None,
    phases: Phases | None = None,
) -> Figure:
    """The report's picture: timeline (stages, or GPUs when no pipeline), phases, power and
    SM activity per GPU (envelopes where samples outnumber pixels), stage occupancy.

    A panel with nothing recorded is left out; collective waits are marked on the line
    plots, and the timeline then shows kernel busy (waiting GPUs spin, the holder idles).
    """
    figure_cls = _matplotlib()
    from matplotlib import colormaps

    pipeline = is_pipeline(diagnosis.evidence)
    stages = report_stages(recording, diagnosis)
    rows = stages if pipeline else tuple((g,) for g in sorted(g for st in stages for g in st))
    names = _row_names(diagnosis, rows, pipeline)
    t0 = recording.start_s if math.isfinite(recording.start_s) else 0.0
    t1 = recording.end_s if math.isfinite(recording.end_s) else t0 + 1.0
    t1 = max(t1, t0 + 1e-3)
    step = native_step_s(recording)
    n_cols = int(max(1, min(_MAX_COLUMNS, math.ceil((t1 - t0) / step) if step > 0 else 1)))
    edges = np.linspace(t0, t1, n_cols + 1)
    centres = (edges[:-1] + edges[1:]) / 2 - t0
    # Fine data (profiler traces) averaged to the page width hides the stagger: zoom in too.
    zoom = step > 0 and (t1 - t0) / step > 1.5 * _MAX_COLUMNS
    any_power = any(s.get(m) is not None for s in recording.series.values() for m in POWER)
    top_metric = "power" if any_power else "kernel busy"
    has_top = any_power or any(
        s.get(Metric.KERNEL_BUSY_RATIO) is not None for s in recording.series.values()
    )
    has_sm = any(s.get(Metric.SM_ACTIVE_RATIO) is not None for s in recording.series.values())
    map_h = max(2, min(len(rows), 8)) * 0.45
    panels: list[tuple[str, float]] = [("map", map_h)]
    if zoom:
        panels.append(("zoom", map_h))
    if phases is not None and phases.segments:
        panels.append(("phases", 0.5))
    if has_top:
        panels.append(("top", 2.0))
    if has_sm:
        panels.append(("sm", 2.0))
    if diagnosis.stages:
        panels.append(("occ", 1.6))
    fig: Figure = figure_cls(figsize=(12, 11 if zoom else 10), dpi=100, layout="constrained")
    made = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": [h for _, h in panels]})
    axes = dict(zip((k for k, _ in panels), np.atleast_1d(made).tolist(), strict=True))
    verdict = diagnosis.verdict.value
    ev = diagnosis.evidence
    conc, bubble = ev.get("concurrency"), ev.get("bubble_ratio")
    head = title or "bubblewatch report"
    sub = f"verdict: {verdict} (confidence {diagnosis.confidence:.2f})"
    if not pipeline and ev.get("job"):
        sub += f"\njob: {ev['job']}"
        share = ev.get("collective_wait_share_ratio")
        if isinstance(share, (int, float)):
            sub += f"   waiting in collectives {share:.0%} of the time"
    else:
        if isinstance(conc, (int, float)):
            sub += f"   concurrency {conc:.2f} of {len(stages)} stages"
        if isinstance(bubble, (int, float)):
            sub += f"   bubble ratio {bubble:.0%}"
    fig.suptitle(f"{head}\n{sub}", fontsize=12, color=VERDICT_COLOURS.get(verdict, "black"))

    held = not pipeline and wait_events(diagnosis)[0] > 0
    grid, label = heatmap(recording, rows, edges, kernels_first=held)
    what = "stage" if pipeline else "GPU"
    _draw_map(
        fig,
        axes["map"],
        grid,
        (0.0, t1 - t0),
        f"Timeline: {label} per {what} (grey: no data)",
        names=names,
    )
    if "zoom" in axes:
        z_edges: FloatArray = t0 + np.arange(_ZOOM_COLUMNS + 1, dtype=np.float64) * step
        z_grid, _ = heatmap(recording, rows, z_edges, kernels_first=held)
        _draw_map(
            fig,
            axes["zoom"],
            z_grid,
            (0.0, _ZOOM_COLUMNS * step),
            f"First {_ZOOM_COLUMNS * step:.3g} s at full resolution ({step * 1e3:.3g} ms bins)",
            names=names,
        )
    if "phases" in axes and phases is not None:
        _draw_phases(axes["phases"], phases, t0, t1)

    colours = colormaps["tab10" if len(recording.gpus) <= 10 else "turbo"]
    n = max(len(recording.gpus), 1)
    lines = [(k, axes[k]) for k in ("top", "sm") if k in axes]
    enveloped = False
    for k, info in enumerate(recording.gpus):
        s = recording.series.get(info.index)
        if s is None or len(s) == 0:
            continue
        c = colours(k if n <= 10 else k / max(n - 1, 1))
        stage = next((i for i, st in enumerate(stages) if info.index in st), None)
        name = f"GPU {info.index}" + ("" if stage is None or not pipeline else f" (s{stage})")
        if info.host:
            name += f" {info.host}"
        if any_power:
            top = next((s.get(m) for m in POWER if s.get(m) is not None), None)
        else:
            top = s.get(Metric.KERNEL_BUSY_RATIO)
        values = {"top": top, "sm": s.get(Metric.SM_ACTIVE_RATIO)}
        for key, ax in lines:
            v = values[key]
            if v is not None:
                enveloped |= _plot_series(ax, s.t_s, v, edges, centres, color=c, label=name)
    titles = {
        "top": "Power per GPU (W)"
        if top_metric == "power"
        else "Kernel busy per GPU (any kernel, NCCL waits too)",
        "sm": "SM activity per GPU (0..1)",
    }
    for key, ax in lines:
        band = " (line: mean, band: min to max per column)" if enveloped else ""
        ax.set_title(titles[key] + band, fontsize=10)
        ax.set_xlim(0, t1 - t0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=min(8, n + 1), loc="upper right")
    if lines:
        lines[-1][1].set_xlabel("seconds")
    if "sm" in axes:
        axes["sm"].set_ylim(0, 1.05)
    _mark_events([ax for _, ax in lines], diagnosis, t0)
    if lines and wait_events(diagnosis)[0]:
        lines[0][1].legend(fontsize=7, ncol=min(8, n + 1), loc="upper right")

    if "occ" in axes:
        ax_occ = axes["occ"]
        occ = [s.occupancy_ratio for s in diagnosis.stages]
        xs = np.arange(len(occ))
        ax_occ.bar(xs, [0.0 if not math.isfinite(v) else v for v in occ], color="#1565c0")
        ax_occ.set_xticks(xs)
        what = "stage" if pipeline else "group"
        ax_occ.set_xticklabels(
            [f"{what} {s.stage}: GPU {','.join(map(str, s.gpus))}" for s in diagnosis.stages],
            fontsize=8,
        )
        ax_occ.set_ylim(0, 1.05)
        ax_occ.set_title(f"{what.capitalize()} occupancy (share of time doing useful work)",
                         fontsize=10)  # fmt: skip
        ax_occ.grid(axis="y", alpha=0.3)
    return fig


def png_bytes(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": "bubblewatch"})
    return buf.getvalue()
