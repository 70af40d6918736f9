"""The human terminal report: verdict, key evidence, per-stage table, stage-activity picture.

Colour only when asked (the CLI asks on a TTY); the text reads the same without it.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.activity import StageActivity
from bubblewatch.detect.segments import Phases
from bubblewatch.detect.shape import is_pipeline
from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.sinks._report_training import training_lines

SHADES = " ░▒▓█"
# Upper bounds of each shade's occupancy band.
_BANDS = np.array([0.05, 0.25, 0.5, 0.75])

# Where --gpu-model named GPUs (evidence `gpu_model_from`); "recording": warned on stderr.
_MODEL_GIVEN = {
    "option": "from --gpu-model (the recording names none)",
    "option and recording": "from --gpu-model where the recording names none",
}
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


def event_row(events: Sequence[Mapping[str, Any]], start_s: float, end_s: float, width: int) -> str:
    """'W' in every column a collective wait covers (events with `start` and `duration_s`)."""
    col_s = (end_s - start_s) / max(width, 1)
    left = start_s + np.arange(width) * col_s
    hit = np.zeros(width, dtype=bool)
    for e in events:
        a, b = float(e["start"]), float(e["start"]) + float(e["duration_s"])
        # A column is marked where its middle falls in the wait (a short one: at its middle).
        covered = (left + col_s / 2 >= a) & (left + col_s / 2 < b)
        if not covered.any():
            covered = (left <= (a + b) / 2) & ((a + b) / 2 < left + col_s)
        hit |= covered
    return "".join(np.where(hit, "W", " ").tolist())


def activity_picture(
    activity: StageActivity,
    *,
    colour: bool = False,
    phases: Phases | None = None,
    row_names: Sequence[str] | None = None,
    events: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """Stages (or GPUs) as rows, time as columns: a pipeline's stagger shows as a diagonal.

    `row_names` label the rows (default `stage N`); `events` (collective waits) get a row
    of their own under the picture.
    """
    lines = []
    names = list(row_names or [f"stage {s:>2}" for s in range(activity.ratio.shape[0])])
    pad = max(8, *(len(n) for n in names))
    for name, row in zip(names, activity.ratio, strict=True):
        body = shade_row(row)
        lines.append(f"  {name:<{pad}} │{_c(body, '36', colour) if colour else body}│")
    width = activity.ratio.shape[1]
    span = activity.end_s - activity.start_s
    if phases is not None and phases.segments:
        row = phase_row(phases, activity.start_s, activity.end_s, width)
        lines.append(f"  {'phases':<{pad}} │{row}│")
    if events:
        row = event_row(events, activity.start_s, activity.end_s, width)
        lines.append(f"  {'waits':<{pad}} │{row}│")
    lines.append(f"{' ' * (pad + 3)}└{'─' * width}┘")
    label = f"0 s{' ' * max(1, width - 3 - len(f'{span:.0f} s'))}{span:.0f} s"
    lines.append(f"{' ' * (pad + 4)}{label}")
    lines.append(
        f"  shades: '{SHADES[1]}' <25%  '{SHADES[2]}' <50%  '{SHADES[3]}' <75%  "
        f"'{SHADES[4]}' busy  (share of time doing useful work)"
    )
    if phases is not None and phases.segments:
        used = sorted({s.verdict for s in phases.segments}, key=lambda v: v.value)
        lines.append("  phases: " + "  ".join(f"{_LETTERS[v]} {v.value}" for v in used))
    if events:
        lines.append("  waits: W a collective wait (the waiting GPUs spin, the holding GPU idles)")
    return lines


def wait_events(d: Diagnosis) -> tuple[int, list[Mapping[str, Any]]]:
    """The collective-wait finding's events: (how many in all, those listed)."""
    f = next((f for f in d.findings if f.verdict is Verdict.COLLECTIVE_WAIT), None)
    if f is None:
        return 0, []
    listed = f.evidence.get("events")
    count = f.evidence.get("event_count")
    events = [e for e in listed if isinstance(e, Mapping)] if isinstance(listed, list) else []
    return (count if isinstance(count, int) else len(events)), events


_TEXT_EVENTS = 12  # waits the text lists (the longest, in time order)


def _event_lines(d: Diagnosis) -> list[str]:
    count, events = wait_events(d)
    if not count:
        return []
    shown = sorted(sorted(events, key=lambda e: -float(e["duration_s"]))[:_TEXT_EVENTS],
                   key=lambda e: float(e["start"]))  # fmt: skip
    more = (
        f" (the longest {len(shown)} listed; --json has {len(events)})"
        if len(shown) < count
        else ""
    )
    out = ["", f"collective waits: {count}{more}", "     start   length   energy burnt waiting"]
    ongoing = d.evidence.get("collective_wait_s")
    last = max(float(e["start"]) for e in events)
    for e in shown:
        j = e.get("energy_j")
        energy = f"{j:>8.0f} J" if isinstance(j, (int, float)) else "       - J"
        going = (
            isinstance(ongoing, (int, float))
            and ongoing > 0
            and float(e["start"]) == last
            and abs(float(e["duration_s"]) - ongoing) <= 0.1
        )
        out.append(
            f"  {e['offset_s']:>7.1f} s  {e['duration_s']:>5.1f} s  {energy}"
            + ("  still going at the window's end" if going else "")
        )
    return out


# Rows of the evidence table that only mean something in a pipeline.
_PIPELINE_ROWS = frozenset(
    {
        "concurrency (sum of stage occupancy)",
        "bubble ratio",
        "range, because",
        "lag order vs topology (Spearman)",
        "topology agrees with data",
        "imbalance (busiest / mean stage)",
        "micro-batches in flight",
        "bubble the schedule allows",
        "energy spent in bubbles",
    }
)


def _job_rows(ev: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a job that is not a pipeline shows instead: its GPUs' work and waits."""
    rows = [("mean GPU occupancy", _num(ev.get("mean_occupancy_ratio"), "{:.0%}"))]
    share = ev.get("collective_wait_share_ratio")
    if isinstance(share, (int, float)):
        n = ev.get("collective_wait_event_count")
        rows.append(("time waiting in collectives", f"{share:.0%} in {_num(n, '{}')} wait(s)"))
        rows.append(("energy burnt waiting", _num(ev.get("collective_wait_energy_j"), "{:.0f} J")))
    return rows


_NOT_PROSE = re.compile(r"^( {3}[+-] | {4,}|All compatible| {3}corrected| {3}on the running)")


def wrap_recommendations(text: str, width: int) -> str:
    """Prose lines of the recommendations wrapped to `width`; commands and diffs left whole."""
    out: list[str] = []
    commands = False
    for line in text.split("\n"):
        commands = commands or line.startswith("All compatible")
        if commands or len(line) <= width or _NOT_PROSE.match(line):
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        hang = lead + (len("note: ") if line.lstrip().startswith("note: ") else 0)
        if re.match(r"^\d+\. ", line):
            hang = line.index(" ") + 1
        out.extend(
            textwrap.wrap(
                line,
                width=width,
                subsequent_indent=" " * hang,
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [line]
        )
    return "\n".join(out)


def render_report(
    diagnosis: Diagnosis,
    *,
    activity: StageActivity | None = None,
    recommendations: str = "",
    source: str = "",
    colour: bool = False,
    phases: Phases | None = None,
    row_names: Sequence[str] | None = None,
    notes: Sequence[str] = (),
    width: int = 100,
) -> str:
    """The whole report as text, the verdict and the job's shape first.

    `row_names`: the picture's rows (GPUs for a job that is not a pipeline);
    `notes`: lines under the headline (how a long recording was read); `width`:
    recommendations are wrapped to it.
    """
    d, ev = diagnosis, diagnosis.evidence
    out: list[str] = []
    head = f"verdict: {d.verdict.value}  (confidence {d.confidence:.2f})"
    out.append(_c(head, "1;" + _COLOURS[d.verdict], colour))
    if ev.get("job"):
        out.append(f"  job: {ev['job']}")
    if ev.get("gpu_count_note"):
        out.append(f"  GPUs: {ev['gpu_count_note']}")
    if ev.get("gpu_model_from") in _MODEL_GIVEN:
        out.append(f"  GPU model: {_MODEL_GIVEN[str(ev['gpu_model_from'])]}")
    out.extend(f"  {n}" for n in notes)
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
            "job" if ev.get("job") else "pipeline",
            str(ev["job"])
            if ev.get("job")
            else f"PP {_num(ev.get('pp_size'), '{}')} x TP {_num(ev.get('tp_size'), '{}')}"
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
    pipeline = is_pipeline(ev)
    if not pipeline:
        # The job's shape is in the headline; the rows say what its GPUs did instead.
        rows = [*_job_rows(ev), *(r for r in rows[1:] if r[0] not in _PIPELINE_ROWS)]
    key_w = max(len(k) for k, _ in rows)
    out.extend(f"  {k:<{key_w}}  {v}" for k, v in rows)
    out.append("")
    out.append("stages:" if pipeline else "GPU groups:")
    out.append(
        ("  stage" if pipeline else "  group")
        + "  gpus        occupancy  SM act  kernel busy  power W  idle W  lag s"
    )
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
    out.extend(_event_lines(d))
    if activity is not None:
        out.append("")
        out.append("stage activity over the window:" if row_names is None else "GPU activity:")
        _, events = wait_events(d)
        out.extend(
            activity_picture(
                activity, colour=colour, phases=phases, row_names=row_names, events=events
            )
        )
    if recommendations:
        # Formatted by the rules engine (bubblewatch.rules.format_recommendations).
        out.append("")
        out.append(wrap_recommendations(recommendations.rstrip("\n"), width))
    return "\n".join(out) + "\n"
