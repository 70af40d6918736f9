"""Draw the report's picture with matplotlib: stage timeline, power and SM activity, occupancy.

matplotlib is an optional dependency (`pip install bubblewatch[report]`); it is
imported only when a figure is drawn, through the object API (no pyplot
state), with the Agg renderer. Missing, it is a `ReportError` that says how
to install it.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.sinks._report_grid import (
    POWER,
    FloatArray,
    binned,
    heatmap,
    native_step_s,
    report_stages,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_MAX_COLUMNS = 600
_ZOOM_COLUMNS = 120
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

    stages = report_stages(recording, diagnosis)
    t0 = recording.start_s if math.isfinite(recording.start_s) else 0.0
    t1 = recording.end_s if math.isfinite(recording.end_s) else t0 + 1.0
    t1 = max(t1, t0 + 1e-3)
    step = native_step_s(recording)
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
    fig.suptitle(f"{head}\n{sub}", fontsize=12, color=VERDICT_COLOURS.get(verdict, "black"))

    grid, label = heatmap(recording, stages, edges)
    _draw_map(
        fig, ax_map, grid, (0.0, t1 - t0), f"Stage timeline: {label} per stage (grey: no data)"
    )
    if ax_zoom is not None:
        z_edges: FloatArray = t0 + np.arange(_ZOOM_COLUMNS + 1, dtype=np.float64) * step
        z_grid, _ = heatmap(recording, stages, z_edges)
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
    any_power = any(s.get(m) is not None for s in recording.series.values() for m in POWER)
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
            top = next((s.get(m) for m in POWER if s.get(m) is not None), None)
        else:
            top = s.get(Metric.KERNEL_BUSY_RATIO)
        for j, (ax, v) in enumerate(((ax_pow, top), (ax_sm, s.get(Metric.SM_ACTIVE_RATIO)))):
            if v is not None:
                ax.plot(centres, binned(s.t_s, v, edges), lw=0.9, color=c, label=name)
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


def png_bytes(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": "bubblewatch"})
    return buf.getvalue()
