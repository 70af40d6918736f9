"""`bubblewatch compare BEFORE AFTER`: did the fix work? Two inputs side by side.

Each input is anything the analyser reads (trace, nvidia-smi CSV, dcgmi dmon,
a PyTorch profiler trace file or a directory of them, or a directory or glob
of files read as one recording, such as the daemon's rotated traces). Both are diagnosed; the
recommendations that fire on BEFORE give the prediction, and AFTER is judged
against it (criterion in bubblewatch/detect/compare.py and docs/inputs.md).
Exit status 0 whatever the outcome; 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from bubblewatch.analysis import analyse_window
from bubblewatch.cli._inputs import add_input_args, load_input, resolve_target
from bubblewatch.cli._output import damage_note
from bubblewatch.cli._trace_bubble import trace_vs_telemetry, trace_vs_telemetry_lines
from bubblewatch.detect.compare import Comparison, Side, compare

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Diagnose BEFORE and AFTER and show the change side by side: verdicts, "
        "stage occupancy, concurrency, bubble ratio, power, bubble energy, tokens/s; "
        "and whether the recommendation made for BEFORE was borne out."
    )
    p.add_argument("before", metavar="BEFORE", help="recording before the change")
    p.add_argument("after", metavar="AFTER", help="recording after the change")
    add_input_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    progress = sys.stderr.isatty() and not args.json
    sides = []
    for label, path in (("BEFORE", args.before), ("AFTER", args.after)):
        if progress:
            print(f"reading and diagnosing {label} ({path}) ...", file=sys.stderr, flush=True)
        rec = load_input(path, args)
        sides.append((rec, analyse_window(rec, resolve_target(args, rec))))
    (b_rec, before), (a_rec, after) = sides
    b_diag, a_diag = before.diagnosis, after.diagnosis
    # Rules fired on BEFORE, each held for the whole recording (it is past data).
    recs = [r.to_dict() for r in before.recommendations]
    result = compare(
        b_diag,
        a_diag,
        before_meta=b_rec.meta,
        after_meta=a_rec.meta,
        before_gpus=len(b_rec.gpus),
        after_gpus=len(a_rec.gpus),
        recommendations=recs,
        labels=(
            os.path.basename(args.before.rstrip("/")),
            os.path.basename(args.after.rstrip("/")),
        ),
    )
    exact = trace_vs_telemetry((b_diag, b_rec.meta), (a_diag, a_rec.meta))
    damage = {
        side: note
        for side, rec in (("before", b_rec), ("after", a_rec))
        if (note := damage_note(rec.meta)) is not None
    }
    if args.json:
        out = result.to_dict()
        out["truncated"] = {side: side in damage for side in ("before", "after")}
        out["recommendations_before"] = recs
        if exact is not None:
            out["trace_vs_telemetry"] = exact
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    paths = {"before": args.before, "after": args.after}
    sys.stdout.write("".join(f"warning: {paths[side]}: {note}\n" for side, note in damage.items()))
    sys.stdout.write(render_comparison(result, recs, colour=sys.stdout.isatty()))
    sys.stdout.write("".join(f"{line}\n" for line in trace_vs_telemetry_lines(exact)))
    return 0


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _f(v: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def _row(name: str, b: str, a: str, change: str = "") -> str:
    return f"  {name:<18} {b:<24} {a:<24} {change}\n"


def _delta(b: float | None, a: float | None, fmt: str, unit: str = "") -> str:
    if b is None or a is None:
        return ""
    ratio = f" (x{a / b:.2f})" if b else ""
    return f"{a - b:+{fmt}}{unit}{ratio}"


def render_comparison(c: Comparison, recs: list[dict[str, Any]], *, colour: bool = False) -> str:
    """The side-by-side table for a terminal."""
    b, a = c.before, c.after

    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    def occ(s: Side) -> str:
        vals = [x for x in s.occupancy if x is not None]
        if len(s.occupancy) <= 4:
            return " ".join("-" if x is None else f"{x:.2f}" for x in s.occupancy)
        return f"{min(vals):.2f}..{max(vals):.2f} ({len(vals)} st.)" if vals else "n/a"

    def energy(s: Side) -> str:
        if s.bubble_energy_j is None:
            return "n/a"
        return f"{s.bubble_energy_j:.0f} J ({_f(s.bubble_power_w, '.0f', ' W')})"

    out = [f"{paint('warning', '33')}: {w}\n" for w in c.warnings]
    out += [
        _row("", "BEFORE", "AFTER", "change"),
        _row("input", b.label[:24], a.label[:24]),
        _row("verdict", f"{b.verdict} ({b.confidence:.2f})", f"{a.verdict} ({a.confidence:.2f})"),
        _row(
            "concurrency",
            _f(b.concurrency, ".2f", f" of {b.pp_size}"),
            _f(a.concurrency, ".2f", f" of {a.pp_size}"),
            _delta(b.concurrency, a.concurrency, ".2f"),
        ),
        _row("bubble ratio", _pct(b.bubble_ratio), _pct(a.bubble_ratio)),
        _row("stage occupancy", occ(b), occ(a)),
        _row(
            "mean power/GPU",
            _f(b.mean_power_w, ".0f", " W"),
            _f(a.mean_power_w, ".0f", " W"),
            _delta(b.mean_power_w, a.mean_power_w, ".0f", " W"),
        ),
        _row(
            "bubble energy",
            energy(b),
            energy(a),
        ),
        _row(
            "tokens/s",
            _f(b.tokens_per_s, ".1f"),
            _f(a.tokens_per_s, ".1f"),
            _delta(b.tokens_per_s, a.tokens_per_s, ".1f"),
        ),
        _row(
            "energy/token", _f(b.joules_per_token, ".2f", " J"), _f(a.joules_per_token, ".2f", " J")
        ),
    ]
    fired = [r for r in recs if r.get("severity") != "info"]
    if fired:
        out.append("\nRecommended for BEFORE:\n")
        out.extend(f"  - {r.get('summary')}\n" for r in fired)
    if c.prediction is not None:
        p = c.prediction
        what = ", ".join(
            x
            for x in (
                p.verdict and f"verdict {p.verdict}",
                p.concurrency is not None and f"concurrency {p.concurrency:.2f}",
                p.throughput_factor is not None and f"throughput x{p.throughput_factor:.2f}",
            )
            if x
        )
        out.append(f"\nPredicted ({p.source}): {what}\n")
    for ch in c.checks:
        mark = {True: paint("ok  ", "32"), False: paint("FAIL", "31"), None: "n/a "}[ch.passed]
        out.append(f"  [{mark}] {ch.name}: {ch.detail}\n")
    code = {True: "1;32", False: "1;31", None: "1"}[c.borne_out]
    out.append("\n" + paint(c.summary, code) + "\n")
    return "".join(out)
