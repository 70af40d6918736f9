"""One run's noise, per load, from the printed output of real-engine runs (A/A pairs).

    .venv/bin/python benchmarks/real_engine/noise.py LOG [LOG ...]

Reads every `C=N fixed ... unchanged A1 / A2 tok/s` line that run.py prints for
a round of A B A and gives, per load and over all, the noise of one run in
log tok/s from its A/A pairs (judge.NoisePool.sigma_per_run): the figure
BENCHMARKS.md ("Real engine") quotes for the CI runs' logs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from judge import NoisePool

_ROUND = re.compile(r"C=(\d+)\s+fixed\s+[\d.]+ tok/s.*unchanged ([\d.]+) / ([\d.]+) tok/s")


def pools(texts: list[str]) -> dict[int, NoisePool]:
    """Per load, the A/A pairs of every round in `texts`."""
    out: dict[int, NoisePool] = {}
    for text in texts:
        for m in _ROUND.finditer(text):
            out.setdefault(int(m[1]), NoisePool()).add_pair(float(m[2]), float(m[3]))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        texts = [Path(p).read_text(errors="replace") for p in argv]
    except OSError as e:
        print(f"noise: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    by_load = pools(texts)
    if not by_load:
        print("noise: no A B A rounds in these logs", file=sys.stderr)
        return 1
    every = NoisePool()
    for c in sorted(by_load):
        pool = by_load[c]
        for a1, a2 in pool.pairs:
            every.add_pair(a1, a2)
        print(f"C={c}: {len(pool.pairs)} A/A pairs, one run's noise {pool.sigma_per_run():.3f}")
    print(f"all: {len(every.pairs)} A/A pairs, one run's noise {every.sigma_per_run():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
