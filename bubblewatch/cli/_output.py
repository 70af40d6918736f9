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

from bubblewatch.detect.activity import StageActivity
from bubblewatch.detect.segments import Phases
from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology
from bubblewatch.outputs import replacing
from bubblewatch.rules import Recommendation, format_recommendations, load_rules, recommend
from bubblewatch.topology.engine import EngineConfig


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


def recommendations_for(
    diagnosis: Diagnosis,
    engine: EngineConfig | None,
    topology: Topology | None,
    recording: Recording,
    rule_paths: list[str] | None = None,
) -> list[Recommendation]:
    """Rules over one recorded window (no `held_s`: `for` counts as met, see rules.evaluate)."""
    rules = load_rules(rule_paths) if rule_paths else load_rules()
    return recommend(
        diagnosis, engine, topology, rules=rules, gpus=recording.gpus, load=recording.load
    )


def emit(
    args: argparse.Namespace,
    recording: Recording,
    diagnosis: Diagnosis,
    topology: Topology | None,
    engine: EngineConfig | None,
    *,
    source: str,
    extra: Mapping[str, Any] | None = None,
    phases: Phases | None = None,
    activity: StageActivity | None = None,
) -> int:
    """Print the report (or JSON) and write any report files; returns the exit status 0.

    `phases`, for a long recording, adds its phases (JSON `segments` with each
    phase's start, end, verdict and confidence, and `dominant_verdict`).
    `activity`: the stage picture, where it was drawn from another window
    than `recording` (a recording analysed window by window).
    """
    recs = recommendations_for(diagnosis, engine, topology, recording, args.rules)
    if getattr(args, "html", None) or getattr(args, "png", None):
        _write_reports(args, recording, diagnosis, recs, source)
    if args.json:
        out = diagnosis.to_dict()
        out["source"] = source
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

    stages = tuple(tuple(s.gpus) for s in diagnosis.stages)
    cols = max(20, min(100, shutil.get_terminal_size((100, 24)).columns - 16))
    if activity is None and stages and recording.n_samples:
        activity = stage_activity(recording, stages, cols)
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    text = render_report(
        diagnosis,
        activity=activity,
        phases=phases,
        source=source,
        colour=colour,
        recommendations=format_recommendations(recs, color=colour),
    )
    sys.stdout.write(text)
    return 0


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
) -> None:
    from bubblewatch.sinks.html_report import write_html_report, write_png_report

    writers = {write_html_report: args.html, write_png_report: args.png}
    wanted = [(write, path) for write, path in writers.items() if path]
    # Both checked before either is drawn, and written whole or not at all.
    with replacing([path for _, path in wanted]) as temps:
        for (write, _), tmp in zip(wanted, temps, strict=True):
            write(tmp, recording, diagnosis, recs, title=source)
    for _, path in wanted:
        print(f"wrote {path}", file=sys.stderr)
