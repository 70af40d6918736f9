"""The real-engine run's report.json as the Markdown tables of BENCHMARKS.md ("Real engine").

.venv/bin/python benchmarks/real_engine/table.py [out/real-engine/report.json]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


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
        "| fix | C | tok/s fixed | unchanged | ratio | interval | verdict | rounds | "
        "noise per round | p50 s fixed (unchanged) | p99 s fixed (unchanged) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fix in report.get("fixes", []):
        for r in fix["runs"]:
            per = r.get("per_round") or [r]
            fixed = statistics.median(x["tok_per_s"] for x in per)
            base = statistics.median(b for x in per for b in x["base_tok_per_s"])
            rounds = ", ".join(f"{x:.2f}" for x in r.get("round_ratios") or [r["ratio"]])
            p50 = [y for x in per for y in x["base_p50_s"] if y is not None]
            p99 = [y for x in per for y in x["base_p99_s"] if y is not None]
            interval = f"x{r['low']:.2f}-x{r['high']:.2f}" if r.get("verdict") else "-"
            own50 = [x["p50_s"] for x in per if x["p50_s"] is not None]
            own99 = [x["p99_s"] for x in per if x["p99_s"] is not None]
            out.append(
                f"| {fix['name']} | {r['concurrency']} | {fixed:.0f} | {base:.0f} | "
                f"x{r['ratio']:.2f} | {interval} | {r.get('verdict') or 'not judged'} | "
                f"{rounds} | {_f(r.get('sigma_d'), '.2f')} | "
                f"{_f(_median(own50), '.2f')} ({_f(_median(p50), '.2f')}) | "
                f"{_f(_median(own99), '.2f')} ({_f(_median(p99), '.2f')}) |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "out/real-engine/report.json")
    print(tables(json.loads(path.read_text())))
