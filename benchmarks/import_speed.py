"""Reading real captures: bubblewatch's importers against pandas and pyarrow on the same files.

    .venv/bin/python benchmarks/import_speed.py --source /work/.mirror [-o FILE] [--runs 7]

The files are real recordings of benchmarks/real_data_manifest.yaml (read at
the manifest's commit with `git show`, as benchmarks/real_data.py reads
them): the 8x H100 nvidia-smi capture `gw-h100-ckpt1` (54k rows, 100 ms, no
index column), the 2-GPU TITAN X capture `gw-titanx-log` and a DCGM CSV of
`ath-t13`. Each reader runs in a fresh child process, `--runs` times; the
table gives the medians of the read itself (`op`, wall) and of the whole
child process (`process`: interpreter, imports and read), and the ratio of
each to pandas' `read_csv` of the same file. pandas and pyarrow are not
bubblewatch dependencies: install them where this runs
(`.venv/bin/pip install pandas pyarrow`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_data import extract, find_git_dir, load_manifest  # noqa: E402

FILES = {
    "gw-h100-ckpt1": "nvidia-smi, 8 GPUs, 54k rows at 100 ms, no index column",
    "gw-titanx-log": "nvidia-smi, 2 GPUs at 100 ms",
    "ath-t13": "DCGM collector CSV (generic importer), node 0",
}
READERS = {
    "bubblewatch": (
        "from bubblewatch.sources.load import load_recording",
        "n = load_recording(PATH).n_samples",
    ),
    "pandas read_csv": ("import pandas", "n = len(pandas.read_csv(PATH, skipinitialspace=True))"),
    "pyarrow csv": ("import pyarrow.csv", "n = pyarrow.csv.read_csv(PATH).num_rows"),
}
CHILD = """
import time
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
{read}
t2 = time.perf_counter()
print(t2 - t1, n)
"""


def run(reader: str, path: Path) -> tuple[float, float, int]:
    imports, read = READERS[reader]
    code = CHILD.format(imports=imports, read=read.replace("PATH", repr(str(path))))
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    whole = time.perf_counter() - t0
    op, n = out.stdout.split()
    return float(op), whole, int(n)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", action="append", type=Path, required=True)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("-o", "--output")
    args = p.parse_args()
    entries = {e.id: e for e in load_manifest(ROOT / "benchmarks" / "real_data_manifest.yaml")}
    lines = [
        f"# benchmarks/import_speed.py, {time.strftime('%Y-%m-%d')}, python "
        f"{sys.version.split()[0]}; medians of {args.runs} runs, each a fresh process",
        f"{'file':<16} {'reader':<16} {'rows':>7} {'op s':>8} {'x pandas':>9} "
        f"{'process s':>10} {'x pandas':>9}",
    ]
    print(lines[0], lines[1], sep="\n", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, what) in enumerate(FILES.items()):
            e = entries[name]
            git_dir = find_git_dir(e.repository, e.commit, args.source)
            if git_dir is None:
                print(f"{name}: repository {e.repository} not found under --source")
                continue
            path = extract(git_dir, e.commit, e.files[0], Path(tmp), k)
            timed = {}
            for reader in READERS:
                runs = [run(reader, path) for _ in range(args.runs)]
                timed[reader] = (
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                    runs[0][2],
                )
            base_op, base_whole, _ = timed["pandas read_csv"]
            for reader, (op, whole, n) in timed.items():
                line = (
                    f"{name:<16} {reader:<16} {n:>7} {op:>8.3f} {op / base_op:>9.2f} "
                    f"{whole:>10.3f} {whole / base_whole:>9.2f}"
                )
                lines.append(line)
                print(line, flush=True)
                results.append({"file": name, "what": what, "reader": reader, "op_s": op,
                                "process_s": whole, "rows": n})  # fmt: skip
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
        Path(args.output).with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
