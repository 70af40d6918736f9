"""The read alone: CPU of `recording_pieces(FILE)` in this checkout beside another, paired.

    .venv/bin/python benchmarks/read_speed.py --source /work/.mirror --before DIR [--runs 5]

DIR is the checkout to compare with, e.g. `git archive main | tar -x -C DIR`.
Each run is a fresh process per checkout, in turn (before, after, before,
...), with PYTHONPATH on that checkout and its working directory outside
both (a script given with `-c` puts its working directory first on the
path). A process imports the readers, then times `list(recording_pieces(FILE))`
(time.process_time): the first read ("first", what `analyze` pays), then
the least of 5 more ("warm"). The table gives the medians over the runs and
the median of the after/before ratios, pair by pair. `--analyze` adds the
CPU of a whole `python -m bubblewatch analyze FILE` of each checkout, paired
the same way (each with a rules cache of its own, BUBBLEWATCH_CACHE_DIR, so
that they do not evict each other's; a warm-up run each, not counted).
Files: those of benchmarks/analyze_speed.py (the real capture
`gw-h100-ckpt1` and the synthetic 1 h x 8 GPUs x 10 Hz nvidia-smi file).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from analyze_speed import bench_files  # noqa: E402

CODE = """
import sys, time
from bubblewatch.sources.load import recording_pieces
def read():
    t = time.process_time(); list(recording_pieces(sys.argv[1])); return time.process_time() - t
first = read()
print(first, min(read() for _ in range(5)))
"""


def read_cpu(checkout: Path, path: Path) -> tuple[float, float]:
    """(first read, least of 5 more) CPU seconds in a fresh process of `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(path)],
        capture_output=True, text=True, check=True, env=env, cwd=tempfile.gettempdir(),
    ).stdout.split()  # fmt: skip
    return float(out[0]), float(out[1])


def analyze_cpu(checkout: Path, path: Path, cache: Path) -> float:
    """CPU seconds (user + system) of one whole `bubblewatch analyze FILE` of `checkout`."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": str(checkout),
        "BUBBLEWATCH_CACHE_DIR": str(cache),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "bubblewatch", "analyze", str(path)],
        stdout=subprocess.DEVNULL, check=True, env=env, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", action="append", type=Path, required=True)
    p.add_argument("--before", type=Path, required=True, help="the checkout to compare with")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bw-scale")
    p.add_argument("--analyze", action="store_true", help="also whole `analyze` runs, paired")
    p.add_argument("-o", "--output")
    args = p.parse_args()
    lines = [
        f"# benchmarks/read_speed.py, {time.strftime('%Y-%m-%d %H:%M')}, python "
        f"{sys.version.split()[0]}; medians of {args.runs} paired fresh processes; CPU s of "
        f"list(recording_pieces(FILE)); before = {args.before}, after = {ROOT}",
        f"{'file':<28} {'first before':>12} {'first after':>11} {'ratio':>6} "
        f"{'warm before':>11} {'warm after':>10} {'ratio':>6}",
    ]
    print(*lines, sep="\n", flush=True)
    with tempfile.TemporaryDirectory() as t:
        files = bench_files(args.source, Path(t), args.cache)
        for name, path in files.items():
            pairs = [(read_cpu(args.before, path), read_cpu(ROOT, path)) for _ in range(args.runs)]
            med = statistics.median
            cols = [
                med(b[k] for b, _ in pairs) if side == 0 else med(a[k] for _, a in pairs)
                for k in (0, 1)
                for side in (0, 1)
            ]
            ratios = [med(a[k] / b[k] for b, a in pairs) for k in (0, 1)]
            lines.append(
                f"{name:<28} {cols[0]:>12.3f} {cols[1]:>11.3f} {ratios[0]:>6.2f} "
                f"{cols[2]:>11.3f} {cols[3]:>10.3f} {ratios[1]:>6.2f}"
            )
            print(lines[-1], flush=True)
            if args.analyze:
                lines.append(_analyze_line(args.before, path, args.runs, Path(t)))
                print(lines[-1], flush=True)
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


def _analyze_line(before: Path, path: Path, runs: int, tmp: Path) -> str:
    sides = ((before, tmp / "cache-before"), (ROOT, tmp / "cache-after"))
    for checkout, cache in sides:
        analyze_cpu(checkout, path, cache)  # fills its rules cache
    pairs = [[analyze_cpu(c, path, cache) for c, cache in sides] for _ in range(runs)]
    med = statistics.median
    b, a = med(p[0] for p in pairs), med(p[1] for p in pairs)
    ratio = med(p[1] / p[0] for p in pairs)
    return f"{'  analyze, whole process':<28} {b:>12.3f} {a:>11.3f} {ratio:>6.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
