"""The human terminal report: verdict, key evidence, per-stage table, stage-activity picture.

Colour only when asked (the CLI asks on a TTY); the text reads the same without it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.activity import StageActivity
from bubblewatch.detect.segments import Phases
from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.sinks._report_training import training_lines

SHADES = " ░▒▓█"
# Upper bounds of each shade's occupancy band.
_BANDS = np.array([0.05, 0.25, 0.5, 0.75])

_COLOURS = {
    Verdict.SERIALIZED: "31",
    Verdict.LAUNCH_BOUND: "33",
    Verdict.IMBALANCED: "33",
    Verdict.STRAGGLER: "33",
    Verdict.HEALTHY: "32",
    Verdict.IDLE: "36",
    Verdict.NOT_PIPELINE: "36",
    Verdict.INSUFFICIENT_DATA: "35",
    Verdict.COLLECTIVE_WAIT: "31",
    Verdict.UNDERFED: "33",
    Verdict.BELOW_SCHEDULE: "33",
}
# One letter per verdict for the phases row under the picture.
_LETTERS = {
    Verdict.SERIALIZED: "S",
    Verdict.HEALTHY: "H",
    Verdict.LAUNCH_BOUND: "L",
    Verdict.IMBALANCED: "B",
    Verdict.STRAGGLER: "T",
    Verdict.IDLE: "i",
    Verdict.NOT_PIPELINE: "n",
    Verdict.INSUFFICIENT_DATA: "?",
    Verdict.COLLECTIVE_WAIT: "W",
    Verdict.UNDERFED: "u",
    Verdict.BELOW_SCHEDULE: "b",
}

# How running requests were counted where the engine's gauge holds one micro-batch.
_RUNNING_FROM = {
    "micro_batch_estimate": " (estimated from one micro-batch x micro-batches in flight)",
    "micro_batch_lower_bound": " (at least: the engine counts one micro-batch)",
}


def _c(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


def _span(ev: Mapping[str, object], key: str, fmt: str) -> str:
    """ " (range LOW-HIGH)" where the compute level leaves the value open, else ""."""
    lo, hi = ev.get(f"{key}_low"), ev.get(f"{key}_high")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return ""
    if not _wide(ev):
        return ""
    return f" (range {fmt.format(lo)}-{fmt.format(hi)})"


def _wide(ev: Mapping[str, object]) -> bool:
    """The bubble range is worth saying: at least a point wide."""
    lo, hi = ev.get("bubble_ratio_low"), ev.get("bubble_ratio_high")
    return isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi - lo >= 0.01


def _num(v: object, fmt: str = "{:.2f}") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return fmt.format(v)
    return str(v)


def shade_row(values: npt.NDArray[np.float64]) -> str:
    """One shaded character per value in 0..1 (NaN as '·')."""
    idx = np.searchsorted(_BANDS, np.nan_to_num(values, nan=0.0), side="right")
    chars = np.array(list(SHADES))[idx]
    chars[~np.isfinite(values)] = "·"
    return "".join(chars.tolist())


def phase_row(phases: Phases, start_s: float, end_s: float, width: int) -> str:
    """One letter per column: the verdict of the phase the column's middle falls in."""
    mids = start_s + (np.arange(width) + 0.5) * (end_s - start_s) / max(width, 1)
    out = []
    for t in mids.tolist():
        seg = next((s for s in phases.segments if s.start_s <= t < s.end_s), None)
        out.append(" " if seg is None else _LETTERS[seg.verdict])
    return "".join(out)


def activity_picture(
    activity: StageActivity, *, colour: bool = False, phases: Phases | None = None
) -> list[str]:
    """Stages as rows, time as columns: the stagger of a pipeline shows as a diagonal."""
    lines = []
    for s, row in enumerate(activity.ratio):
        body = shade_row(row)
        lines.append(f"  stage {s:>2} │{_c(body, '36', colour) if colour else body}│")
    width = activity.ratio.shape[1]
    span = activity.end_s - activity.start_s
    if phases is not None and phases.segments:
        lines.append(f"  phases   │{phase_row(phases, activity.start_s, activity.end_s, width)}│")
    lines.append(f"           └{'─' * width}┘")
    label = f"0 s{' ' * max(1, width - 3 - len(f'{span:.0f} s'))}{span:.0f} s"
    lines.append(f"            {label}")
    lines.append(
        f"  shades: '{SHADES[1]}' <25%  '{SHADES[2]}' <50%  '{SHADES[3]}' <75%  "
        f"'{SHADES[4]}' busy  (share of time doing useful work)"
    )
    if phases is not None and phases.segments:
        used = sorted({s.verdict for s in phases.segments}, key=lambda v: v.value)
        lines.append("  phases: " + "  ".join(f"{_LETTERS[v]} {v.value}" for v in used))
    return lines


def render_report(
    diagnosis: Diagnosis,
    *,
    activity: StageActivity | None = None,
    recommendations: str = "",
    source: str = "",
    colour: bool = False,
    phases: Phases | None = None,
) -> str:
    """The whole report as text."""
    d, ev = diagnosis, diagnosis.evidence
    out: list[str] = []
    head = f"verdict: {d.verdict.value}  (confidence {d.confidence:.2f})"
    out.append(_c(head, "1;" + _COLOURS[d.verdict], colour))
    if d.verdict is Verdict.SERIALIZED and d.load_limited is not None:
        out.append(
            "  load-limited: too few requests to fill the pipeline (inherent)"
            if d.load_limited
            else "  under load: a configuration problem, not a lack of work"
        )
    if source:
        out.append(f"  source: {source}")
    out.append(
        f"  window {d.window_s:.1f} s, {d.n_samples} samples, "
        f"occupancy from {_num(ev.get('signal'))}"
    )
    out.append("")
    out.append("findings:")
    for f in d.findings:
        out.append(f"  - {f.verdict.value} ({f.confidence:.2f}): {f.summary}")
    if d.verdict is Verdict.INSUFFICIENT_DATA:
        return "\n".join(out) + "\n"
    out.append("")
    out.append("evidence:")
    rows = [
        (
            "pipeline",
            f"PP {_num(ev.get('pp_size'), '{}')} x TP {_num(ev.get('tp_size'), '{}')}"
            f" (topology {_num(ev.get('topology_source'))})",
        ),
        (
            "concurrency (sum of stage occupancy)",
            _num(ev.get("concurrency")) + _span(ev, "concurrency", "{:.2f}"),
        ),
        (
            "bubble ratio",
            _num(ev.get("bubble_ratio"), "{:.0%}") + _span(ev, "bubble_ratio", "{:.0%}"),
        ),
        *(
            [("range, because", _num(ev.get("bubble_range_reason")))]
            if _wide(ev) and ev.get("bubble_range_reason")
            else []
        ),
        ("lag order vs topology (Spearman)", _num(ev.get("lag_rank_correlation"))),
        ("topology agrees with data", _num(ev.get("topology_agreement"))),
        ("spin-wait (kernels busy, SMs idle)", _num(ev.get("spin_ratio"), "{:.0%}")),
        ("launch-bound index", _num(ev.get("launch_bound_index"))),
        ("imbalance (busiest / mean stage)", _num(ev.get("imbalance_ratio"))),
        ("straggler GPU", _num(ev.get("straggler_gpu"), "{}")),
        (
            "pipeline evidence",
            f"{_num(ev.get('pipeline_evidence'))}"
            + (
                f" (stagger p = {ev['stagger_p_value']:.3f})"
                if isinstance(ev.get("stagger_p_value"), float)
                else ""
            ),
        ),
        ("micro-batches in flight", _num(ev.get("micro_batches_in_flight"))),
        ("bubble the schedule allows", _num(ev.get("expected_bubble_ratio"), "{:.0%}")),
        ("energy spent in bubbles", _num(ev.get("bubble_energy_j"), "{:.0f} J")),
        (
            "running / queued requests",
            f"{_num(ev.get('running_requests'), '{:.1f}')} / "
            f"{_num(ev.get('queued_requests'), '{:.1f}')}"
            + _RUNNING_FROM.get(str(ev.get("running_requests_source")), ""),
        ),
    ]
    if isinstance(ev.get("micro_batch_requests"), (int, float)):
        rows.append(("requests per micro-batch (engine)", _num(ev["micro_batch_requests"])))
    width = max(len(k) for k, _ in rows)
    out.extend(f"  {k:<{width}}  {v}" for k, v in rows)
    out.append("")
    out.append("stages:")
    out.append("  stage  gpus        occupancy  SM act  kernel busy  power W  idle W  lag s")
    for s in d.stages:
        gpus = ",".join(str(g) for g in s.gpus)
        out.append(
            f"  {s.stage:>5}  {gpus:<10}  {_num(s.occupancy_ratio, '{:>9.0%}')}  "
            f"{_num(s.sm_active_ratio, '{:>6.2f}')}  {_num(s.kernel_busy_ratio, '{:>11.0%}')}  "
            f"{_num(s.power_w, '{:>7.0f}')}  {_num(s.idle_power_w, '{:>6.0f}')}  "
            f"{_num(s.lag_s, '{:>5.2f}')}"
        )
    out.extend(training_lines(d))
    if phases is not None and phases.segments:
        out.append("")
        dom = phases.dominant.value if phases.dominant is not None else "-"
        out.append(f"phases (dominant: {dom}):")
        t0 = phases.segments[0].start_s
        for seg in phases.segments:
            label = f"  [{seg.label}]" if seg.label else ""
            out.append(
                f"  {seg.start_s - t0:>7.0f} s - {seg.end_s - t0:>5.0f} s  "
                f"{seg.verdict.value} ({seg.confidence:.2f}){label}"
            )
    if activity is not None:
        out.append("")
        out.append("stage activity over the window:")
        out.extend(activity_picture(activity, colour=colour, phases=phases))
    if recommendations:
        # Formatted by the rules engine (bubblewatch.rules.format_recommendations).
        out.append("")
        out.append(recommendations.rstrip("\n"))
    return "\n".join(out) + "\n"
