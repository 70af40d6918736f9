"""What `analyze` and `diagnose` print: the diagnosis, then the recommendations.

Human text (with the stage picture) on a terminal, one JSON object with
`--json`, and optional HTML/PNG report files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from bubblewatch.analysis import WindowAnalysis
from bubblewatch.detect.activity import StageActivity
from bubblewatch.detect.segments import Phases
from bubblewatch.detect.shape import is_pipeline
from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology
from bubblewatch.outputs import replacing
from bubblewatch.rules import Recommendation, RuleSet, format_recommendations, load_rules
from bubblewatch.topology.engine_config import EngineConfig


def add_output_args(p: argparse.ArgumentParser, *, reports: bool = True) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.add_argument(
        "--rules",
        metavar="PATH",
        action="append",
        help="rule file or directory instead of the shipped rules (repeatable)",
    )
    if reports:
        p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
        p.add_argument("--png", metavar="FILE", help="also write the report's picture as PNG")


def rules_of(args: argparse.Namespace) -> RuleSet | None:
    """The rules `--rules` names (None: the shipped rules)."""
    paths = getattr(args, "rules", None)
    return load_rules(paths) if paths else None


def emit(
    args: argparse.Namespace,
    recording: Recording,
    result: WindowAnalysis,
    *,
    source: str,
    extra: Mapping[str, Any] | None = None,
    phases: Phases | None = None,
    activity: StageActivity | None = None,
    notes: tuple[str, ...] = (),
) -> int:
    """Print the report (or JSON) and write any report files; returns the exit status 0.

    `phases`, for a long recording, adds its phases (JSON `segments` with each
    phase's start, end, verdict and confidence, and `dominant_verdict`).
    `activity`: the stage picture, where it was drawn from another window
    than `recording` (a recording analysed window by window).
    `notes`: lines printed under the headline.
    """
    diagnosis, recs = result.diagnosis, result.recommendations
    topology, engine = result.target.topology, result.target.engine
    if getattr(args, "html", None) or getattr(args, "png", None):
        _write_reports(args, recording, diagnosis, recs, source, phases=phases)
    damage = damage_note(recording.meta)
    skipped = skipped_files(recording.meta)
    if args.json:
        out = diagnosis.to_dict()
        out["source"] = source
        if skipped:
            out["skipped_files"] = skipped
        out["truncated"] = damage is not None
        if isinstance(recording.meta.get("truncation"), Mapping):
            out["truncation"] = dict(recording.meta["truncation"])
        if damage is not None and _cut_files(recording.meta):
            out["truncated_files"] = _cut_files(recording.meta)
        out["topology"] = None if topology is None else public_topology(topology)
        out["engine"] = None if engine is None else public_engine(engine)
        out["recommendations"] = [r.to_dict() for r in recs]
        if phases is not None:
            out.update(phases.to_dict())
        out.update(extra or {})
        json.dump(out, sys.stdout, indent=2, allow_nan=False, default=str)
        sys.stdout.write("\n")
        return 0
    from bubblewatch.detect.activity import stage_activity
    from bubblewatch.sinks.report import render_report

    stages = picture_rows(diagnosis)
    cols = max(20, min(100, shutil.get_terminal_size((100, 24)).columns - 16))
    if activity is None and stages and recording.n_samples:
        activity = stage_activity(recording, stages, cols)
    tty = sys.stdout.isatty()
    colour = args.color == "always" or (args.color == "auto" and tty)
    text = render_report(
        diagnosis,
        activity=activity,
        phases=phases,
        source=source,
        colour=colour,
        recommendations=format_recommendations(recs, color=colour),
        row_names=row_names(diagnosis, activity),
        notes=notes,
        width=text_width(tty),
    )
    for f in skipped:
        sys.stdout.write(f"warning: {source}: skipped {f['path']}: {f['reason']}\n")
    if damage is not None:
        sys.stdout.write(f"warning: {source}: {damage}\n")
    sys.stdout.write(text)
    return 0


def skipped_files(meta: Mapping[str, Any]) -> list[dict[str, str]]:
    """The files of a directory left unread (empty ones, what a full disk leaves)."""
    listed = meta.get("skipped_files")
    if not isinstance(listed, list):
        return []
    return [
        {"path": str(f.get("path")), "reason": str(f.get("reason"))}
        for f in listed
        if isinstance(f, Mapping)
    ]


def damage_note(meta: Mapping[str, Any]) -> str | None:
    """What the report says of a file cut short or damaged (None: read whole)."""
    if not meta.get("truncated"):
        return None
    cut = meta.get("truncation")
    files = _cut_files(meta)
    if files:
        return f"cut short: {', '.join(files)}; each analysed up to where it ends"
    if not isinstance(cut, Mapping):
        return "the file is cut short; analysed up to where it ends"
    return (
        f"the file is damaged at line {cut.get('line')} (byte {cut.get('byte')}): "
        f"{cut.get('reason')}; analysed up to there"
    )


def picture_rows(diagnosis: Diagnosis) -> tuple[tuple[int, ...], ...]:
    """The picture's rows: the stages of a pipeline, else every GPU on its own row."""
    stages = tuple(tuple(s.gpus) for s in diagnosis.stages)
    if is_pipeline(diagnosis.evidence):
        return stages
    return tuple((g,) for g in sorted(g for st in stages for g in st))


def row_names(diagnosis: Diagnosis, activity: StageActivity | None) -> list[str] | None:
    """`GPU g` per row where the picture has a row per GPU (None: stage rows)."""
    if is_pipeline(diagnosis.evidence):
        return None
    rows = picture_rows(diagnosis)
    if activity is None or activity.ratio.shape[0] != len(rows):
        return None
    ev = diagnosis.evidence
    role = {g: " holds" for g in _ints(ev.get("holding_gpus"))}
    role.update({g: " waits" for g in _ints(ev.get("waiting_gpus"))})
    return [f"GPU {g[0]}{role.get(g[0], '')}" for g in rows]


def _ints(v: object) -> list[int]:
    return [x for x in v if isinstance(x, int)] if isinstance(v, list) else []


def text_width(tty: bool) -> int:
    """The terminal's width on a terminal; 100 columns into a file or pipe."""
    if not tty:
        return 100
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def public_topology(topo: Topology) -> dict[str, Any]:
    """The topology without its command line and environment (the engine block has those)."""
    d = topo.to_dict()
    d.pop("argv", None)
    d.pop("env", None)
    return d


def public_engine(engine: EngineConfig) -> dict[str, Any]:
    """Engine facts for output; argv and env are already redacted by the parser."""
    return engine.to_dict()


def _write_reports(
    args: argparse.Namespace,
    recording: Recording,
    diagnosis: Diagnosis,
    recs: list[Recommendation],
    source: str,
    *,
    phases: Phases | None,
) -> None:
    from bubblewatch.sinks.html_report import write_html_report, write_png_report

    writers = {write_html_report: args.html, write_png_report: args.png}
    wanted = [(write, path) for write, path in writers.items() if path]
    # Both checked before either is drawn, and written whole or not at all.
    with replacing([path for _, path in wanted]) as temps:
        for (write, _), tmp in zip(wanted, temps, strict=True):
            write(tmp, recording, diagnosis, recs, title=source, phases=phases)
    for _, path in wanted:
        print(f"wrote {path}", file=sys.stderr)


def _cut_files(meta: Mapping[str, Any]) -> list[str]:
    """The files of a joined recording that were cut short (empty for one file)."""
    files = meta.get("files")
    if not isinstance(files, list):
        return []
    return [str(f.get("path")) for f in files if isinstance(f, Mapping) and f.get("truncated")]
