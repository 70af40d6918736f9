"""Recommendations for a terminal: severity, summary, the fix, the corrected command, the gain."""

from __future__ import annotations

from collections.abc import Sequence

from bubblewatch.rules.evaluate import Recommendation, combined_fix
from bubblewatch.rules.model import Severity
from bubblewatch.rules.render import RenderedFix

_COLOR = {Severity.CRITICAL: "\033[31m", Severity.WARNING: "\033[33m", Severity.INFO: "\033[36m"}
_RESET = "\033[0m"
_DIM = "\033[2m"


def format_recommendations(recs: Sequence[Recommendation], color: bool = False) -> str:
    """Human text for a list of recommendations ('No recommendations.' when empty)."""
    if not recs:
        return "No recommendations."
    out: list[str] = ["Recommendations:"]
    for i, r in enumerate(recs, 1):
        sev = r.severity.value.upper()
        if color:
            sev = f"{_COLOR[r.severity]}{sev}{_RESET}"
        out.append(f"{i}. [{sev}] {r.summary}  ({r.rule})")
        if r.description:
            out.extend(f"   {line}" for line in r.description.strip().splitlines())
        if r.fix is not None:
            if r.rendered is not None:
                # What the fix changes in this command line.
                out.extend(f"   + {a}" for a in r.rendered.added)
                out.extend(f"   - {d}" for d in r.rendered.removed)
            else:
                for flag, value in r.fix.add_flags:
                    out.append(f"   + {flag}" + ("" if value is None else f" {value}"))
                for spec in r.fix.remove_flags:
                    flag, eq, value = spec.partition("=")
                    out.append(f"   - {flag}" + (f" {value} (where given)" if eq else ""))
                out.extend(f"   + env {k}={v}" for k, v in r.fix.set_env)
            if r.fix.note:
                out.extend(f"   note: {line}" for line in r.fix.note.strip().splitlines())
        if r.rendered is not None:
            out.extend(_rendered(r.rendered, color))
        if r.expected_gain is not None:
            g = r.expected_gain
            parts = [f"expected gain ({g.metric}):"]
            if g.factor is not None:
                parts.append(f"about x{g.factor:.2f}")
            if g.text:
                parts.append(g.text)
            out.append("   " + " ".join(parts))
    both = combined_fix(recs)
    if both is not None:
        out.append("All compatible command-line fixes together:")
        out.extend(f"   {line}" for line in both.diff.splitlines())
        if both.valid:
            cmd = f"   {both.command}"
            out.append(f"{_DIM}{cmd}{_RESET}" if color else cmd)
        else:
            out.extend(f"   not rendered: {p}" for p in both.problems)
        if both.caveat:
            out.append(f"   ({both.caveat})")
    return "\n".join(out)


def _rendered(fix: RenderedFix, color: bool) -> list[str]:
    """The corrected command line (or why the version would refuse it) and the live call."""
    out: list[str] = []
    if fix.valid:
        out.append("   corrected command line:")
        cmd = f"     {fix.command}"
        out.append(f"{_DIM}{cmd}{_RESET}" if color else cmd)
    else:
        out.extend(f"   not rendered: {p}" for p in fix.problems)
    if fix.caveat:
        out.append(f"   ({fix.caveat})")
    if fix.live:
        out.append("   on the running server, no restart:")
        live = f"     {fix.live}"
        out.append(f"{_DIM}{live}{_RESET}" if color else live)
    return out
