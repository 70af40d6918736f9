"""The real-engine run's report.json as the Markdown tables of BENCHMARKS.md ("Real engine").

.venv/bin/python benchmarks/real_engine/table.py [out/real-engine/report.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def tables(report: dict[str, Any]) -> str:
    out = [
        "| C | tok/s | p50 s | p99 s | /metrics = client | truth work PP0 / PP1 | "
        "ranks at once | steps/s | reqs/step | truth bubble | stand-in | detector | "
        "error | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.get("base", []):
        t = r.get("truth") or {}
        w = t.get("work", {})
        out.append(
            f"| {r['concurrency']} | {r['tok_per_s']:.0f} | {_f(r['p50_s'], '.2f')} | "
            f"{_f(r['p99_s'], '.2f')} | {r['agreement']:.0%} | "
            f"{_f(w.get('0'), '.2f')} / {_f(w.get('1'), '.2f')} | "
            f"{_f(t.get('both_busy_ratio'), '.1%')} | {_f(t.get('steps_per_s'), '.1f')} | "
            f"{_f(t.get('mean_batch_reqs'), '.1f')} | {_f(t.get('bubble_ratio'), '.3f')} | "
            f"{_f(r.get('standin_bubble_ratio'), '.3f')} | {_f(r.get('bubble_ratio'), '.3f')} | "
            f"{_f(r.get('bubble_error'), '+.3f')} | {r.get('verdict')} |"
        )
    out += [
        "",
        "| fix | C | tok/s fixed | unchanged before / after | ratio (rounds) | noise | "
        "p50 s fixed (unchanged) | p99 s fixed (unchanged) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fix in report.get("fixes", []):
        for r in fix["runs"]:
            base = " / ".join(f"{b:.0f}" for b in r["base_tok_per_s"])
            rounds = r.get("round_ratios") or [r["ratio"]]
            judged = "" if not fix.get("not_rendered_here") else ", not judged"
            p50 = [x for x in r["base_p50_s"] if x is not None]
            p99 = [x for x in r["base_p99_s"] if x is not None]
            out.append(
                f"| {fix['name']} | {r['concurrency']} | {r['tok_per_s']:.0f} | "
                f"{base} | x{r['ratio']:.2f} ({', '.join(f'{x:.2f}' for x in rounds)}{judged}) | "
                f"{r['noise']:.0%} | "
                f"{_f(r['p50_s'], '.2f')} ({_f(max(p50, default=None), '.2f')}) | "
                f"{_f(r['p99_s'], '.2f')} ({_f(max(p99, default=None), '.2f')}) |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "out/real-engine/report.json")
    print(tables(json.loads(path.read_text())))
