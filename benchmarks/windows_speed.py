"""The windowed detector's CPU in process, this checkout beside another, paired round by round.

    .venv/bin/python benchmarks/windows_speed.py --before DIR [--file F] [--rounds 15]

`analyse_windows` over a file's 600 s windows (read beforehand, as `analyze`
cuts them: `recording_pieces`, `stream.windows`), `time.process_time` around
it. Each side is one long-lived process with its code on PYTHONPATH (this
checkout; DIR, e.g. `git archive HEAD | tar -x -C DIR` of the commit to
compare); the first call of each (the detector's lazy imports) is reported
apart, then the sides take turns, A B, B A, ..., and the table gives the
medians and the median of the ratios pair by pair. Default file: the
synthetic 1 h x 8 GPUs x 10 Hz nvidia-smi file of benchmarks/scale.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _serve(path: str) -> int:
    """Read the windows once; for every line on stdin, time analyse_windows and print it."""
    from bubblewatch.detect.long import analyse_windows
    from bubblewatch.sources.load import recording_pieces
    from bubblewatch.sources.stream import windows

    cut = list(windows(iter(list(recording_pieces(path))), length_s=600.0, max_samples=10**9))
    print("ready", flush=True)
    for _ in sys.stdin:
        t = time.process_time()
        analyse_windows(iter(cut), lambda w: w.topology)
        print(f"{time.process_time() - t:.5f}", flush=True)
    return 0


class _Side:
    def __init__(self, code: Path, path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(code)}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(path)]
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        if self.stdout.readline().strip() != b"ready":
            raise SystemExit(f"{code}: the detector did not start")

    def run(self) -> float:
        self.stdin.write(b"go\n")
        self.stdin.flush()
        return float(self.stdout.readline())

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, help="the other checkout (its package on PYTHONPATH)")
    p.add_argument("--file", type=Path, help="default: the 1 h x 8 GPU x 10 Hz nvidia-smi file")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bw-scale")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("-o", "--output")
    args = p.parse_args()
    if args.serve:
        return _serve(args.serve)
    if args.before is None or not (args.before / "bubblewatch").is_dir():
        raise SystemExit("--before DIR: a checkout with a bubblewatch package")
    path = args.file
    if path is None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from scale import Case, data_file

        path = data_file(args.cache, Case("1h", 3600.0, 0.1, 8), "smi")
    b, a = _Side(args.before, path), _Side(ROOT, path)
    first_b, first_a = b.run(), a.run()
    before: list[float] = []
    after: list[float] = []
    for i in range(args.rounds):
        for side in (a, b) if i % 2 else (b, a):
            (after if side is a else before).append(side.run())
    a.close()
    b.close()
    ratio = statistics.median(x / y for x, y in zip(after, before, strict=True))
    lines = [
        f"# benchmarks/windows_speed.py, {time.strftime('%Y-%m-%d %H:%M')}, {path.name}; "
        f"analyse_windows CPU s in process, A = this checkout, B = {args.before}",
        f"first call (lazy imports): A {first_a:.3f}, B {first_b:.3f}",
        f"median of {args.rounds}: A {statistics.median(after):.3f}, "
        f"B {statistics.median(before):.3f}, A/B {ratio:.3f} (pair by pair)",
        f"least: A {min(after):.3f}, B {min(before):.3f}",
    ]
    print(*lines, sep="\n")
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
