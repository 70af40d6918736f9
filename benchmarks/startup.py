"""CLI start-up: bubblewatch's commands beside an empty interpreter, paired in one run.

    .venv/bin/python benchmarks/startup.py [-o FILE] [--runs 15]

Each row runs A (a bubblewatch command) and B (its yardstick, `python -c
pass`) in turn, A B A B ..., `--runs` times each, every run a fresh process;
it gives the medians of A's and B's whole-process wall and CPU seconds and
the median of the ratios A/B taken pair by pair (pairing keeps the ratio
meaningful when a shared machine's speed drifts). `python -m bubblewatch` and
the console script (the `bubblewatch` beside the interpreter) both run this
checkout's package (PYTHONPATH). Then `python -X importtime` of the small
file's `analyze`: the modules it spends most on, cumulative, median of the
runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "fixtures" / "importers" / "nvidia_smi_units.csv"
SCRIPT = Path(sys.executable).with_name("bubblewatch")
PY = [sys.executable]
YARDSTICK = [*PY, "-c", "pass"]
COMMANDS = {
    "python -m bubblewatch --version": [*PY, "-m", "bubblewatch", "--version"],
    "bubblewatch --version": [str(SCRIPT), "--version"],
    "python -m bubblewatch --help": [*PY, "-m", "bubblewatch", "--help"],
    "bubblewatch --help": [str(SCRIPT), "--help"],
    "bubblewatch analyze --help": [*PY, "-m", "bubblewatch", "analyze", "--help"],
    "bubblewatch analyze SMALL": [*PY, "-m", "bubblewatch", "analyze", str(SMALL)],
}
# An installed package runs from its bytecode (pip compiles it; a checkout's first run
# writes __pycache__, the warm-up run): PYTHONDONTWRITEBYTECODE, set on some development
# machines, would make every measured run compile bubblewatch's sources again.
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPATH": str(ROOT),
}


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one whole child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, cwd=ROOT, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def paired(cmd: list[str], runs: int, yardstick: list[str] = YARDSTICK) -> dict[str, float]:
    timed(cmd), timed(yardstick)  # warm-up, not counted
    pairs = [(timed(cmd), timed(yardstick)) for _ in range(runs)]
    med = statistics.median
    return {
        "a_wall": med(a[0] for a, _ in pairs),
        "b_wall": med(b[0] for _, b in pairs),
        "wall_ratio": med(a[0] / b[0] for a, b in pairs),
        "a_cpu": med(a[1] for a, _ in pairs),
        "b_cpu": med(b[1] for _, b in pairs),
        "cpu_ratio": med(a[1] / b[1] for a, b in pairs if b[1] > 0),
    }


def import_costs(cmd: list[str], runs: int, depth: int = 1) -> dict[str, float]:
    """Cumulative import ms of the modules up to `depth` levels below the command's own."""
    seen: dict[str, list[float]] = {}
    for _ in range(runs):
        out = subprocess.run(
            [cmd[0], "-X", "importtime", *cmd[1:]],
            capture_output=True, text=True, check=True, cwd=ROOT, env=ENV,
        )  # fmt: skip
        for line in out.stderr.splitlines()[1:]:
            if not line.startswith("import time:"):
                continue
            _, cumulative, name = line.split("|")
            if (len(name) - len(name.lstrip()) - 1) // 2 <= depth:
                seen.setdefault(name.strip(), []).append(int(cumulative) / 1000)
    return {name: statistics.median(ms) for name, ms in seen.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--min-ms", type=float, default=10.0, help="smallest import cost listed")
    p.add_argument("-o", "--output")
    args = p.parse_args()
    lines = [
        f"# benchmarks/startup.py, {time.strftime('%Y-%m-%d')}, python {sys.version.split()[0]}; "
        f"medians of {args.runs} paired runs, whole processes; B = python -c pass",
        f"{'command (A)':<34} {'A wall s':>9} {'B wall s':>9} {'A/B wall':>9} "
        f"{'A cpu s':>8} {'B cpu s':>8} {'A/B cpu':>8}",
    ]
    print(*lines, sep="\n", flush=True)
    for name, cmd in COMMANDS.items():
        if not Path(cmd[0]).exists():
            lines.append(f"{name:<34} (no {cmd[0]})")
            print(lines[-1])
            continue
        r = paired(cmd, args.runs)
        lines.append(
            f"{name:<34} {r['a_wall']:>9.3f} {r['b_wall']:>9.3f} {r['wall_ratio']:>9.2f} "
            f"{r['a_cpu']:>8.3f} {r['b_cpu']:>8.3f} {r['cpu_ratio']:>8.2f}"
        )
        print(lines[-1], flush=True)
    costs = import_costs(COMMANDS["bubblewatch analyze SMALL"], max(3, args.runs // 5))
    breakdown = [
        "",
        f"# python -X importtime -m bubblewatch analyze SMALL: cumulative ms of the modules "
        f"of the first two levels, >= {args.min_ms:g} ms",
    ]
    for name, ms in sorted(costs.items(), key=lambda kv: -kv[1]):
        if ms >= args.min_ms:
            breakdown.append(f"{name:<50} {ms:>8.1f}")
    print(*breakdown, sep="\n")
    lines += breakdown
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
