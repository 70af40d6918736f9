"""YAML with line numbers: bubblewatch.safeyaml (on PyYAML) beside ruamel.yaml, import and parse.

    .venv/bin/python benchmarks/yaml_readers.py [-o FILE] [--runs 11]

Each reader runs in a fresh child process, the readers in turn (A B C A B C
...), `--runs` times each: the import of the reader, then the parse of each
file (the shipped rule file and a built-in scenario), best of 5 in that
process. The table gives the medians over the runs. ruamel.yaml is not a
bubblewatch dependency: install it where this runs (`.venv/bin/pip install
ruamel.yaml`); its round-trip loader is the one that keeps line numbers
(`CommentedMap.lc`), its safe loader keeps none.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = {
    "rules": ROOT / "rules" / "bubblewatch.rules.yaml",
    "scenario": ROOT / "bubblewatch" / "scenarios" / "pp8-serialized.yaml",
}
READERS = {
    "bubblewatch.safeyaml": (
        "from bubblewatch.safeyaml import parse_yaml",
        "parse_yaml(TEXT, 'f').line",
    ),
    "ruamel.yaml rt (lines)": (
        "from ruamel.yaml import YAML",
        "YAML(typ='rt').load(TEXT).lc.line",
    ),
    "ruamel.yaml safe pure": (
        "from ruamel.yaml import YAML",
        "YAML(typ='safe', pure=True).load(TEXT)",
    ),
    "PyYAML safe_load": ("import yaml", "yaml.safe_load(TEXT)"),
}
CHILD = """
import time
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
out = [t1 - t0]
for path in {paths!r}:
    TEXT = open(path, encoding="utf-8").read()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        {parse}
        best = min(best, time.perf_counter() - t)
    out.append(best)
print(*out)
"""


def run(reader: str) -> list[float]:
    imports, parse = READERS[reader]
    paths = [str(p) for p in FILES.values()]
    code = CHILD.format(imports=imports, parse=parse, paths=paths)
    env = {"PYTHONPATH": str(ROOT), "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    return [float(x) for x in out.stdout.split()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("-o", "--output")
    args = p.parse_args()
    runs: dict[str, list[list[float]]] = {r: [] for r in READERS}
    for _ in range(args.runs):
        for reader in READERS:
            runs[reader].append(run(reader))
    sizes = "; ".join(
        f"{name} {len(path.read_text().splitlines())} lines" for name, path in FILES.items()
    )
    lines = [
        f"# benchmarks/yaml_readers.py, {time.strftime('%Y-%m-%d')}, python "
        f"{sys.version.split()[0]}; medians of {args.runs} runs, each a fresh process ({sizes})",
        f"{'reader':<24} {'import ms':>10} " + " ".join(f"{n + ' ms':>12}" for n in FILES),
    ]
    for reader, rows in runs.items():
        med = [statistics.median(col) * 1000 for col in zip(*rows, strict=True)]
        lines.append(f"{reader:<24} {med[0]:>10.1f} " + " ".join(f"{m:>12.1f}" for m in med[1:]))
    print("\n".join(lines))
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
