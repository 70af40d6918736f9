"""Recommendations for a terminal: severity, summary, the fix, the corrected command, the gain."""

from __future__ import annotations

from collections.abc import Sequence

from bubblewatch.rules.evaluate import Recommendation, combined_fix
from bubblewatch.rules.model import Severity

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
            for flag, value in r.fix.add_flags:
                out.append(f"   + {flag}" + ("" if value is None else f" {value}"))
            out.extend(f"   - {flag}" for flag in r.fix.remove_flags)
            out.extend(f"   + env {k}={v}" for k, v in r.fix.set_env)
            if r.fix.note:
                out.extend(f"   note: {line}" for line in r.fix.note.strip().splitlines())
        if r.rendered is not None:
            out.append("   corrected command line:")
            cmd = f"     {r.rendered.command}"
            out.append(f"{_DIM}{cmd}{_RESET}" if color else cmd)
        if r.expected_gain is not None:
            g = r.expected_gain
            parts = [f"expected gain ({g.metric}):"]
            if g.factor is not None:
                parts.append(f"up to x{g.factor:.1f}")
            if g.text:
                parts.append(g.text)
            out.append("   " + " ".join(parts))
    both = combined_fix(recs)
    if both is not None:
        out.append("All command-line fixes together:")
        out.extend(f"   {line}" for line in both.diff.splitlines())
        cmd = f"   {both.command}"
        out.append(f"{_DIM}{cmd}{_RESET}" if color else cmd)
    return "\n".join(out)
