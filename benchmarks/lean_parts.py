"""Where `analyze` of the 1 h file spends its CPU, and what the BLAS thread and the rule trees cost.

    .venv/bin/python benchmarks/lean_parts.py [--runs 3] [-o FILE]

Each figure from fresh processes (this checkout on PYTHONPATH, bytecode as
installed), medians of `--runs`:

- parts: `bubblewatch analyze` of the synthetic 1 h x 8 GPUs x 10 Hz
  nvidia-smi file (benchmarks/scale.py) with the CPU (time.process_time) of
  its imports, the read (`recording_pieces`), the windows' diagnoses and the
  rules step (`judge_recorded`) taken apart;
- BLAS: the same `analyze` with `OPENBLAS_NUM_THREADS=2` (what OpenBLAS
  starts on two cores without the CLI's choice) and as the CLI runs it (one
  thread): CPU of the main thread and of every other thread, from
  /proc/self/task at exit;
- rules: `load_rules()` of the shipped set from the rules cache, and the
  same with every expression's tree rebuilt (as the cache read before they
  were kept apart).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import emit  # noqa: E402
from scale import Case, data_file  # noqa: E402

PARTS = r"""
import json, sys, time
t0 = time.process_time()
from bubblewatch.cli.main import one_blas_thread
one_blas_thread()  # as main() does, before numpy is imported
import bubblewatch.analysis, bubblewatch.cli.analyze
import bubblewatch.cli._long as cl, bubblewatch.detect.long as dl
import bubblewatch.sources.load as sl
from bubblewatch.cli.main import main
acc = {"imports": time.process_time() - t0}
def timed(mod, name, key, gen=False):
    f = getattr(mod, name)
    def plain(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[key] = acc.get(key, 0.0) + time.process_time() - t
    def pieces(*a, **k):
        it = f(*a, **k)
        while True:
            t = time.process_time()
            try:
                x = next(it)
            except StopIteration:
                return
            finally:
                acc[key] = acc.get(key, 0.0) + time.process_time() - t
            yield x
    setattr(mod, name, pieces if gen else plain)
timed(sl, "recording_pieces", "read", gen=True)
timed(dl, "diagnose", "diagnose")
timed(cl, "judge_recorded", "rules")
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    main(["analyze", sys.argv[1]])
acc["whole"] = time.process_time() - t0
print(json.dumps(acc))
"""

THREADS = r"""
import json, os, sys, contextlib, io
from bubblewatch.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["analyze", sys.argv[1]])
tick, me, others = os.sysconf("SC_CLK_TCK"), 0.0, []
for tid in os.listdir("/proc/self/task"):
    f = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    s = (int(f[11]) + int(f[12])) / tick
    if int(tid) == os.getpid():
        me = s
    else:
        others.append(s)
print(json.dumps({"main": me, "others": sum(others), "threads": len(others)}))
"""

RULES = r"""
import json, pickle, time
from bubblewatch.rules import load_rules
load_rules()  # fill the cache
t = time.process_time(); rs = load_rules(); lazy = time.process_time() - t
exprs = [r.expr for r in rs.rules] + [e for r in rs.rules for e, _ in r.summary.holes]
t = time.process_time()
for e in exprs:
    e.tree
print(json.dumps({"load": lazy, "trees": time.process_time() - t, "exprs": len(exprs)}))
"""


def child(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, float]:
    drop = ("PYTHONDONTWRITEBYTECODE", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    full = {k: v for k, v in os.environ.items() if k not in drop}
    full.update({"PYTHONPATH": str(ROOT), **(env or {})})
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=full, capture_output=True, text=True, check=True
    )
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bw-scale")
    p.add_argument("-o", "--output")
    args = p.parse_args()
    path = str(data_file(args.cache, Case("1h", 3600.0, 0.1, 8), "smi"))
    child(PARTS, path)  # fills the rules cache, as a user's first run does
    lines = [
        f"# benchmarks/lean_parts.py, {time.strftime('%Y-%m-%d %H:%M')}, python "
        f"{sys.version.split()[0]}; medians of {args.runs} fresh processes, CPU s"
    ]
    parts = medians([child(PARTS, path) for _ in range(args.runs)])
    keys = ("imports", "read", "diagnose", "rules", "whole")
    lines.append("analyze 1 h file: " + ", ".join(f"{k} {parts[k]:.3f}" for k in keys))
    for label, env in (("OPENBLAS_NUM_THREADS=2", {"OPENBLAS_NUM_THREADS": "2"}), ("CLI", {})):
        t = medians([child(THREADS, path, env=env) for _ in range(args.runs)])
        lines.append(
            f"BLAS {label}: main thread {t['main']:.2f}, {t['threads']:.0f} other thread(s) "
            f"{t['others']:.2f}"
        )
    r = medians([child(RULES) for _ in range(args.runs)])
    lines.append(
        f"rules from the cache: load_rules {r['load'] * 1000:.1f} ms; rebuilding all "
        f"{r['exprs']:.0f} expression trees {r['trees'] * 1000:.1f} ms"
    )
    emit(lines, Path(args.output) if args.output else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
