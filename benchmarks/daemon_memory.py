"""Where the daemon's resident memory goes: tracemalloc by package, modules loaded, RSS parts.

Runs the real daemon (`bubblewatch run`, the config daemon_cost.py writes:
simulated pp8-serialized, 8 GPUs at 1 Hz, or 8 replicas of it, 64 GPUs, at
10 Hz) in a child process with tracemalloc on, and after `--after` seconds
(default 60) prints, from inside that process:

- VmRSS and its parts (/proc/self/status: RssAnon is the heap and arrays,
  RssFile the mapped code: the interpreter, numpy's and other extensions'
  shared libraries);
- the Python heap tracemalloc sees, by package of the allocating file
  (module code and data are attributed to the file that imports them; numpy
  arrays to the line that made them);
- the modules loaded, counted by top-level package.

tracemalloc itself costs memory and time (it is on only in this benchmark),
so the RSS printed here is above daemon_cost.py's; the shares are the point.

    python benchmarks/daemon_memory.py [--gpus 8|64] [--rate 1] [--after 60]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon_cost import Case, daemon_config  # noqa: E402

CHILD = r"""
import collections, ctypes, os, sys, threading, time, tracemalloc
tracemalloc.start(1)
AFTER = {after}
TRIM = {trim}

def part(name):
    for line in open("/proc/self/status"):
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")

def bucket(filename):
    if "<frozen" in filename:
        return "(import machinery)"
    p = filename.replace(os.sep, "/")
    if "/bubblewatch/" in p:
        rest = p.rsplit("/bubblewatch/", 1)[1].split("/")
        return "bubblewatch." + (rest[0] if len(rest) > 1 else rest[0].removesuffix(".py"))
    if "site-packages/" in p:
        return p.split("site-packages/", 1)[1].split("/")[0].removesuffix(".py")
    return "(stdlib)"

def report():
    time.sleep(AFTER)
    snap = tracemalloc.take_snapshot()
    by = collections.Counter()
    for st in snap.statistics("filename"):
        by[bucket(st.traceback[0].filename)] += st.size
    traced = sum(by.values())
    mods = collections.Counter(m.split(".")[0] for m in list(sys.modules))
    current, peak = tracemalloc.get_traced_memory()
    before = part("RssAnon")
    trimmed = ctypes.CDLL(None).malloc_trim(0) if TRIM else 0
    out = [
        f"traced now {{current / 2**20:.1f}} MB, peak {{peak / 2**20:.1f}} MB;"
        f" malloc_trim(0) {{'returned' if trimmed else 'did not return'}} memory:"
        f" RssAnon {{before:.1f}} -> {{part('RssAnon'):.1f}} MB" if TRIM else
        f"traced now {{current / 2**20:.1f}} MB, peak {{peak / 2**20:.1f}} MB",
        f"after {{AFTER:g}} s: VmRSS {{part('VmRSS'):.1f}} MB = RssAnon {{part('RssAnon'):.1f}}"
        f" + RssFile {{part('RssFile'):.1f}} + RssShmem {{part('RssShmem'):.1f}};"
        f" tracemalloc sees {{traced / 2**20:.1f}} MB"
        f" (its own overhead {{tracemalloc.get_tracemalloc_memory() / 2**20:.1f}} MB)",
        "python heap by package (MB):",
    ]
    out += [f"  {{v / 2**20:7.2f}}  {{k}}" for k, v in by.most_common(20)]
    out.append(f"modules loaded: {{len(sys.modules)}}; by package: " + ", ".join(
        f"{{k}} {{v}}" for k, v in mods.most_common(15)))
    out.append("largest lines (MB):")
    for st in snap.statistics("lineno")[:12]:
        f = st.traceback[0]
        where = f.filename.split("site-packages/")[-1]
        out.append(f"  {{st.size / 2**20:7.2f}}  {{where}}:{{f.lineno}}")
    sys.stderr.write("\n".join("MEM " + l for l in out) + "\n")
    sys.stderr.flush()
    os._exit(0)

threading.Thread(target=report, daemon=True).start()
from bubblewatch.cli.main import main
sys.exit(main(["run", "--config", {cfg!r}]))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8, choices=(8, 64))
    ap.add_argument("--rate", type=float, default=1.0, help="samples per second per GPU")
    ap.add_argument("--history", type=float, default=60.0, help="ring history, seconds")
    ap.add_argument("--after", type=float, default=60.0, help="seconds before the snapshot")
    ap.add_argument(
        "--trim",
        action="store_true",
        help="also call malloc_trim(0) first: what the heap can give back",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        case = Case(args.gpus, args.rate, args.history, run_s=args.after, warmup_s=0)
        cfg = daemon_config(case, tmp)
        code = CHILD.format(after=args.after, cfg=str(cfg), trim=args.trim)
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
        )
    lines = [ln[4:] for ln in proc.stderr.splitlines() if ln.startswith("MEM ")]
    if not lines:
        sys.stderr.write(proc.stderr[-3000:])
        return 1
    print(
        f"# benchmarks/daemon_memory.py --gpus {args.gpus} --rate {args.rate:g} "
        f"--history {args.history:g} --after {args.after:g}"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
