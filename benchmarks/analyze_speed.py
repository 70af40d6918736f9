"""Whole-file analysis beside pandas' `read_csv` of the same file, paired in one run.

    .venv/bin/python benchmarks/analyze_speed.py --source /work/.mirror \\
        --pandas /tmp/pdvenv/bin/python [--runs 7] [-o FILE]

A is `python -m bubblewatch analyze FILE` (this checkout, PYTHONPATH); B is
`PANDAS_PYTHON -c "import pandas; pandas.read_csv(FILE, skipinitialspace=True)"`,
an interpreter with pandas installed (pandas is no bubblewatch dependency:
give a throwaway venv's python, e.g. `python3 -m venv /tmp/pdvenv &&
/tmp/pdvenv/bin/pip install 'pandas==3.1.*'`). They run in turn, A B A B ...,
each a fresh process (benchmarks/startup.py's `paired`); the table gives the
medians of A's and B's wall and CPU seconds and of the ratios A/B taken pair
by pair. Files: the real 8x H100 nvidia-smi capture `gw-h100-ckpt1` of
benchmarks/real_data_manifest.yaml (54k rows at 100 ms) and the synthetic
1 h x 8 GPUs x 10 Hz nvidia-smi file of benchmarks/scale.py. A first
`analyze` fills the rules cache (bubblewatch/rules/_cache.py) as any user's
first run does; the warm-up run is not counted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_data import extract, find_git_dir, load_manifest  # noqa: E402
from scale import Case, data_file  # noqa: E402
from startup import PY, paired  # noqa: E402


def real_file(sources: list[Path], tmp: Path) -> Path:
    entries = {e.id: e for e in load_manifest(ROOT / "benchmarks" / "real_data_manifest.yaml")}
    e = entries["gw-h100-ckpt1"]
    git_dir = find_git_dir(e.repository, e.commit, sources)
    if git_dir is None:
        raise SystemExit(f"no clone of {e.repository} with commit {e.commit[:10]} under --source")
    return extract(git_dir, e.commit, e.files[0], tmp, 0)


def bench_files(sources: list[Path], tmp: Path, cache: Path) -> dict[str, Path]:
    """The two files the lean goal names: the real capture and the synthetic hour."""
    return {
        "gw-h100-ckpt1 (real, 54k rows)": real_file(sources, tmp),
        "synthetic 1 h 8 GPU 10 Hz": data_file(cache, Case("1h", 3600.0, 0.1, 8), "smi"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", action="append", type=Path, required=True)
    p.add_argument("--pandas", required=True, help="a python with pandas installed")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--pyarrow", action="store_true", help="also pyarrow.csv.read_csv vs pandas")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bw-scale")
    p.add_argument("-o", "--output")
    args = p.parse_args()
    version = subprocess.run(
        [args.pandas, "-c", "import pandas; print(pandas.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    lines = [
        f"# benchmarks/analyze_speed.py, {time.strftime('%Y-%m-%d')}, python "
        f"{sys.version.split()[0]}, pandas {version}; medians of {args.runs} paired runs, "
        "whole processes; A = bubblewatch analyze FILE, B = pandas.read_csv(FILE)",
        f"{'file':<28} {'A wall s':>9} {'B wall s':>9} {'A/B wall':>9} "
        f"{'A cpu s':>8} {'B cpu s':>8} {'A/B cpu':>8}",
    ]
    print(*lines, sep="\n", flush=True)
    with tempfile.TemporaryDirectory() as t:
        files = bench_files(args.source, Path(t), args.cache)
        for name, path in files.items():
            a = [*PY, "-m", "bubblewatch", "analyze", str(path)]
            read = f"import pandas; pandas.read_csv({str(path)!r}, skipinitialspace=True)"
            rows = {name: a}
            if args.pyarrow:
                arrow = f"import pyarrow.csv as c; c.read_csv({str(path)!r})"
                rows["  pyarrow read_csv (as A)"] = [args.pandas, "-c", arrow]
            for label, cmd in rows.items():
                r = paired(cmd, args.runs, [args.pandas, "-c", read])
                lines.append(
                    f"{label:<28} {r['a_wall']:>9.3f} {r['b_wall']:>9.3f} {r['wall_ratio']:>9.2f} "
                    f"{r['a_cpu']:>8.3f} {r['b_cpu']:>8.3f} {r['cpu_ratio']:>8.2f}"
                )
                print(lines[-1], flush=True)
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
