"""Detector accuracy on the simulated scenario suite: confusion matrix, precision, recall.

    .venv/bin/python benchmarks/accuracy.py [-o benchmarks/results/accuracy.txt]

The cases and their expected verdicts (written from each scenario's physics)
live in tests/detect/scenario_suite.py, shared with the test suite.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

from bubblewatch.detect import Verdict

ROOT = Path(__file__).resolve().parent.parent


def _suite() -> ModuleType:
    path = ROOT / "tests" / "detect" / "scenario_suite.py"
    spec = importlib.util.spec_from_file_location("scenario_suite", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["scenario_suite"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", help="also write the report to this file")
    args = ap.parse_args()
    suite = _suite()
    labels = [v.value for v in Verdict]
    pairs: list[tuple[str, str]] = []
    lines: list[str] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as wd:
        for case in suite.CASES:
            rec = suite.run_case(case, wd)
            d = suite.diagnose_case(case, rec)
            got = d.verdict.value
            ok, what = case.check(d)
            pairs.append((case.expected, got if ok or got != case.expected else got + "(?)"))
            lines.append(
                f"{'ok  ' if ok else 'MISS'} {case.name:<52} expected {case.expected:<17} "
                f"got {got:<17} conf {d.confidence:.2f}"
                + (f" load_limited={d.load_limited}" if d.load_limited is not None else "")
                + (f" finding {case.finding}" if case.finding and ok else "")
                + (f" ({what})" if what else "")
            )
            print(lines[-1], file=sys.stderr)
    elapsed = time.perf_counter() - t_start
    counts = Counter(pairs)
    width = max(len(x) for x in labels) + 1
    out = [f"bubblewatch detector accuracy: {len(pairs)} simulated cases ({elapsed:.0f} s)", ""]
    out += lines
    out += ["", "confusion matrix (rows: expected, columns: detected)", ""]
    short = {v: v[:6] for v in labels}
    out.append(" " * width + " ".join(f"{short[c]:>6}" for c in labels))
    for r in labels:
        out.append(f"{r:<{width}}" + " ".join(f"{counts.get((r, c), 0):>6}" for c in labels))
    out += ["", f"{'verdict':<{width}} {'n':>3} {'precision':>9} {'recall':>7}"]
    for v in labels:
        tp = counts.get((v, v), 0)
        predicted = sum(n for (_, g), n in counts.items() if g == v)
        actual = sum(n for (e, _), n in counts.items() if e == v)
        prec = f"{tp / predicted:.2f}" if predicted else "-"
        rec_ = f"{tp / actual:.2f}" if actual else "-"
        out.append(f"{v:<{width}} {actual:>3} {prec:>9} {rec_:>7}")
    right = sum(n for (e, g), n in counts.items() if e == g)
    false_serial = sum(
        n
        for (e, g), n in counts.items()
        if g == "serialized" and e in ("idle", "not_pipeline", "healthy")
    )
    out += [
        "",
        f"correct: {right}/{len(pairs)}",
        f"serialized called on idle/TP/DP/healthy cases: {false_serial}",
    ]
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0 if right == len(pairs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
