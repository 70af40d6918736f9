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

With `--since S` it instead snapshots the heap at S and at `--after`
seconds (8 frames deep) and prints the lines whose live memory grew most in
between, in KB per minute, with every minute the RSS, glibc malloc's own
counts (`mallinfo2`: in use, free inside its heaps, mmapped) and, without
tracemalloc, pymalloc's arenas (`sys._debugmallocstats`; tracemalloc hides
them): set S after the rings are full (1.25 x `--history` seconds, their
slack) to see what grows in steady state. `--untraced` runs it without
tracemalloc (RSS and the allocators' counts only, at the daemon's own cost);
`--trim` calls malloc_trim(0) at both instants.

    python benchmarks/daemon_memory.py --gpus 64 --rate 10 --history 60 \
        --since 180 --after 660 --untraced
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
TRACE = {frames} > 0
if TRACE:
    tracemalloc.start({frames})
AFTER = {after}
TRIM = {trim}
SINCE = {since}
TOP = {top}

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

class _MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

def heap():
    # glibc's malloc over all arenas: in use, free inside the heaps, mmapped blocks (MB).
    f = ctypes.CDLL(None).mallinfo2
    f.restype = _MallInfo
    m = f()
    return (f"malloc in use {{m.uordblks / 2**20:.1f}} free {{m.fordblks / 2**20:.1f}}"
            f" mmapped {{m.hblkhd / 2**20:.1f}} MB")

def arenas():
    # pymalloc's own arenas (mmapped, not malloc): sys._debugmallocstats writes C stderr.
    if TRACE:
        return "pymalloc arenas not shown (tracemalloc on)"
    import re, tempfile
    with tempfile.TemporaryFile("w+") as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read()
    def num(label):
        m = re.search(r"^" + re.escape(label) + r"\s*=\s*([\d,]+)", text, re.M)
        return int(m.group(1).replace(",", "")) if m else -1
    return (f"pymalloc arenas {{num('# arenas allocated current')}}"
            f" ({{num('# bytes in allocated blocks') / 2**20:.1f}} MB in blocks,"
            f" {{num('# bytes in available blocks') / 2**20:.1f}} MB free in them)")

def where(frame):
    return f"{{frame.filename.split('site-packages/')[-1]}}:{{frame.lineno}}"

def growth():
    # Snapshots at SINCE and AFTER: the lines whose live heap changed most in between.
    t0 = time.monotonic()
    time.sleep(SINCE)
    # RSS read after the first snapshot and before the second: both include the first.
    first = tracemalloc.take_snapshot() if TRACE else None
    rss0, anon0, traced0 = part("VmRSS"), part("RssAnon"), tracemalloc.get_traced_memory()[0]
    heap0 = f"{{heap()}}; {{arenas()}}"
    if TRIM:
        ctypes.CDLL(None).malloc_trim(0)
        trim0 = f"; after malloc_trim(0) RssAnon {{part('RssAnon'):.1f}} MB, {{heap()}}"
    while (left := AFTER - (time.monotonic() - t0)) > 0:
        time.sleep(min(60.0, left))
        sys.stderr.write(
            f"MEM   t={{time.monotonic() - t0:5.0f}} s VmRSS {{part('VmRSS'):.1f}} MB"
            f" RssAnon {{part('RssAnon'):.1f}} MB traced"
            f" {{tracemalloc.get_traced_memory()[0] / 2**20:.2f}} MB"
            f" (tracemalloc's own {{tracemalloc.get_tracemalloc_memory() / 2**20:.1f}} MB)"
            f" threads {{threading.active_count()}}; {{heap()}}; {{arenas()}}\n"
        )
        sys.stderr.flush()
    rss1, anon1, traced1 = part("VmRSS"), part("RssAnon"), tracemalloc.get_traced_memory()[0]
    heap1 = f"{{heap()}}; {{arenas()}}"
    if TRIM:
        ctypes.CDLL(None).malloc_trim(0)
        trim1 = f"; after malloc_trim(0) RssAnon {{part('RssAnon'):.1f}} MB, {{heap()}}"
    second = tracemalloc.take_snapshot() if TRACE else None
    mins = (AFTER - SINCE) / 60.0
    out = [
        f"from {{SINCE:g}} s to {{AFTER:g}} s ({{mins:.1f}} min):"
        f" VmRSS {{rss0:.1f}} -> {{rss1:.1f}} MB ({{(rss1 - rss0) * 1024 / mins:+.0f}} KB/min),"
        f" RssAnon {{anon0:.1f}} -> {{anon1:.1f}} MB,"
        f" traced {{traced0 / 2**20:.2f}} -> {{traced1 / 2**20:.2f}} MB"
        f" ({{(traced1 - traced0) / 1024 / mins:+.1f}} KB/min)",
        f"at {{SINCE:g}} s: {{heap0}}{{trim0 if TRIM else ''}}",
        f"at {{AFTER:g}} s: {{heap1}}{{trim1 if TRIM else ''}}",
    ]
    if first is None or second is None:
        sys.stderr.write("\n".join("MEM " + l for l in out) + "\n")
        sys.stderr.flush()
        os._exit(0)
    out.append("largest changes by line (KB/min, live blocks at the end):")
    noise = [tracemalloc.Filter(False, tracemalloc.__file__)]
    a, b = first.filter_traces(noise), second.filter_traces(noise)
    for st in b.compare_to(a, "lineno")[:TOP]:
        out.append(
            f"  {{st.size_diff / 1024 / mins:+9.1f}}  {{st.count_diff:+7d}} blocks"
            f"  {{st.count:7d}}  {{where(st.traceback[0])}}"
        )
    out.append("largest changes by traceback (KB/min; innermost frame first):")
    for st in b.compare_to(a, "traceback")[:TOP]:
        out.append(f"  {{st.size_diff / 1024 / mins:+9.1f}}  {{st.count_diff:+7d}} blocks")
        out += [f"      {{where(f)}}" for f in st.traceback]
    sys.stderr.write("\n".join("MEM " + l for l in out) + "\n")
    sys.stderr.flush()
    os._exit(0)

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

threading.Thread(target=growth if SINCE else report, daemon=True).start()
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
    ap.add_argument(
        "--since",
        type=float,
        default=0.0,
        help="growth mode: snapshots at SINCE and AFTER seconds, print what grew in between",
    )
    ap.add_argument("--top", type=int, default=15, help="growth mode: lines to print")
    ap.add_argument(
        "--frames", type=int, default=0, help="traceback depth (default 1, or 8 with --since)"
    )
    ap.add_argument(
        "--untraced",
        action="store_true",
        help="growth mode without tracemalloc: RSS, malloc's and pymalloc's own counts only",
    )
    args = ap.parse_args()
    if args.since and not 0 < args.since < args.after:
        ap.error("--since must be between 0 and --after")
    if args.untraced and not args.since:
        ap.error("--untraced needs --since")
    frames = -1 if args.untraced else args.frames or (8 if args.since else 1)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        case = Case(args.gpus, args.rate, args.history, run_s=args.after, warmup_s=0)
        cfg = daemon_config(case, tmp)
        code = CHILD.format(
            after=args.after,
            cfg=str(cfg),
            trim=args.trim,
            since=args.since,
            top=args.top,
            frames=frames,
        )
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
        + (f" --since {args.since:g}" if args.since else "")
        + (" --trim" if args.trim else "")
        + (" --untraced" if args.untraced else "")
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
