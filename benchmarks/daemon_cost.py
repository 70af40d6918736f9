"""What `bubblewatch run` costs the host: CPU share of one core and resident memory.

Starts the real daemon on simulated GPUs (8 = pp8-serialized, 64 = the same
engine as 8 data-parallel replicas), scrapes /metrics every 15 s as
Prometheus would, and reads /proc/PID/stat (utime + stime) and
/proc/PID/status (VmRSS) while it runs. CPU is measured after a warm-up
(start-up imports and the simulation are excluded) until the end; RSS is
sampled every 5 s to show it flat once the ring buffers are full.

The simulated source is not NVML: its per-poll cost (array indexing) is
measured by the daemon itself (thread CPU inside `source.poll`, logged at
exit as `source_cpu_s`) and reported separately, as is the memory of the
pre-simulated timeline (`bytes` in the "simulated scenario ready" line).
The simulated source emits no driver-buffered rows, so the ring figures
leave out the per-GPU buffer ring a GPU host adds (at most 50 rows/s over
`analysis.window` + 25%, 3 arrays: 90 KB per GPU at the 60 s default;
docs/daemon.md, "Cost").

    python benchmarks/daemon_cost.py            # the full matrix, ~10 minutes
    python benchmarks/daemon_cost.py --quick    # a 1-minute smoke run
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Case:
    gpus: int
    rate_hz: float
    history_s: float
    run_s: float
    warmup_s: float = 20.0


@dataclass
class Result:
    case: Case
    cpu_share: float
    source_share: float
    rss_mb: list[tuple[float, float]]
    ring_bytes: int
    sim_bytes: int
    simulate_cpu_s: float
    polls: int


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scenario(tmp: Path, gpus: int) -> str:
    if gpus == 8:
        return "pp8-serialized"
    from bubblewatch.sim.scenario import builtin_dir

    raw = yaml.safe_load((builtin_dir() / "pp8-serialized.yaml").read_text())
    raw["name"] = f"pp8-serialized-x{gpus // 8}"
    raw["parallel"]["dp_size"] = gpus // 8
    raw["workload"]["concurrency"] = 8 * (gpus // 8)
    path = tmp / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def daemon_config(case: Case, tmp: Path) -> Path:
    """The case's daemon configuration, written under `tmp`; returns its path."""
    d = tmp / f"g{case.gpus}-r{case.rate_hz:g}-h{case.history_s:g}"
    d.mkdir()
    cfg = {
        "web": {"listen_address": "127.0.0.1:0"},
        "sampling": {"interval": f"{1.0 / case.rate_hz:g}s", "history": f"{case.history_s:g}s"},
        "analysis": {"interval": "10s", "window": f"{min(30.0, case.history_s):g}s"},
        "alerting": {"state_dir": str(d / "state"), "instance": "bench"},
        "simulate": scenario(tmp, case.gpus),
    }
    (d / "cfg.yml").write_text(yaml.safe_dump(cfg))
    return d / "cfg.yml"


def run_case(case: Case, tmp: Path) -> Result:
    d = daemon_config(case, tmp).parent
    log = (d / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bubblewatch", "run", "--config", str(d / "cfg.yml")],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        port = None
        t0 = time.monotonic()
        while port is None and time.monotonic() - t0 < 60:
            m = re.search(r"address=127\.0\.0\.1:(\d+)", (d / "daemon.log").read_text())
            port = int(m.group(1)) if m else None
            time.sleep(0.2)
        if port is None:
            raise RuntimeError(f"daemon did not start: {(d / 'daemon.log').read_text()}")
        start = time.monotonic()
        rss: list[tuple[float, float]] = []
        c1 = w1 = None
        next_scrape = start
        while (el := time.monotonic() - start) < case.run_s:
            if c1 is None and el >= case.warmup_s:
                c1, w1 = cpu_s(proc.pid), time.monotonic()
            if time.monotonic() >= next_scrape:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
                next_scrape += 15.0
            rss.append((round(el, 1), rss_mb(proc.pid)))
            time.sleep(5.0)
        c2, w2 = cpu_s(proc.pid), time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    text = (d / "daemon.log").read_text()
    stopped = re.search(
        r"msg=stopped polls=(\d+) samples=\d+ source_cpu_s=([\d.]+) "
        r"simulate_cpu_s=([\d.]+) ring_bytes=(\d+)",
        text,
    )
    ready = re.search(r"msg=\"simulated scenario ready\".* bytes=(\d+)", text)
    assert stopped and ready and c1 is not None and w1 is not None, text
    polls, src_cpu = int(stopped.group(1)), float(stopped.group(2))
    wall = w2 - w1
    # Source CPU in the measured span: its total scaled by the span's share of the polls.
    span_polls = wall * case.rate_hz
    return Result(
        case,
        (c2 - c1) / wall,
        src_cpu * min(1.0, span_polls / polls) / wall,
        rss,
        int(stopped.group(4)),
        int(ready.group(1)),
        float(stopped.group(3)),
        polls,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short case (smoke test)")
    ap.add_argument(
        "--ten-minutes",
        action="store_true",
        help="8 and 64 GPUs at 1 and 10 Hz with the default 10 min history, 11 min each, "
        "the four daemons side by side",
    )
    ap.add_argument(
        "--case",
        nargs=4,
        type=float,
        metavar=("GPUS", "HZ", "HISTORY_S", "RUN_S"),
        help="one case only (e.g. --case 64 10 600 660)",
    )
    ap.add_argument(
        "-o", "--output", default=str(Path(__file__).parent / "results" / "daemon_cost.txt")
    )
    args = ap.parse_args()
    parallel = False
    if args.case:
        g, r, h, run_s = args.case
        cases = [Case(int(g), r, h, run_s)]
    elif args.quick:
        cases = [Case(8, 1.0, 30.0, 40.0, 10.0)]
    elif args.ten_minutes:
        cases = [Case(g, r, 600.0, 660.0) for g in (8, 64) for r in (1.0, 10.0)]
        parallel = True
    else:
        cases = [Case(g, r, 60.0, 100.0) for g in (8, 64) for r in (1.0, 10.0)]
        cases += [Case(64, 10.0, 30.0, 60.0), Case(64, 10.0, 120.0, 150.0)]
    lines = [
        f"# bubblewatch run: daemon cost ({time.strftime('%Y-%m-%d %H:%M')}, "
        f"{os.cpu_count()} CPUs shared with other work, Python {sys.version.split()[0]})",
        "# simulated GPUs, analysis every 10 s over min(30 s, history), /metrics scraped / 15 s;",
        "# cpu = utime+stime over wall after a 20 s warm-up; source = thread CPU in",
        "# source.poll() (the simulation's indexing, which NVML calls would replace);",
        "# rss = VmRSS; ring = the ring buffers' bytes; sim = the pre-simulated timeline's bytes.",
        "",
        f"{'gpus':>4} {'rate':>6} {'history':>7} {'run':>5} {'cpu%core':>9} {'source%':>8} "
        f"{'excl.src%':>9} {'rss_MB_end':>10} {'ring_KB':>8} {'sim_MB':>7} {'sim_cpu_s':>9}",
    ]
    results = []
    with tempfile.TemporaryDirectory(prefix="bwbench") as t:
        if parallel:
            # Side by side: each daemon's CPU is its own utime+stime, so sharing the
            # cores stretches nothing but wall time; the run is 4x shorter.
            print(f"running {len(cases)} cases side by side ...", file=sys.stderr, flush=True)
            with ThreadPoolExecutor(len(cases)) as pool:
                done = list(pool.map(lambda c: run_case(c, Path(t)), cases))
        else:
            done = []
            for case in cases:
                print(f"running {case} ...", file=sys.stderr, flush=True)
                done.append(run_case(case, Path(t)))
        for r in done:
            case = r.case
            results.append(r)
            lines.append(
                f"{case.gpus:>4} {case.rate_hz:>4g}Hz {case.history_s:>6g}s {case.run_s:>4g}s "
                f"{100 * r.cpu_share:>9.2f} {100 * r.source_share:>8.2f} "
                f"{100 * (r.cpu_share - r.source_share):>9.2f} {r.rss_mb[-1][1]:>10.1f} "
                f"{r.ring_bytes / 1024:>8.0f} {r.sim_bytes / 2**20:>7.1f} "
                f"{r.simulate_cpu_s:>9.2f}"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    lines += [
        "",
        "# RSS over time (s: MB); the ring buffers wrap after 1.25 x `history` seconds "
        "(their slack):",
    ]
    for r in results:
        c = r.case
        lines.append(
            f"{c.gpus} GPUs {c.rate_hz:g} Hz history {c.history_s:g}s: "
            + " ".join(f"{t:g}:{m:.1f}" for t, m in r.rss_mb)
        )
    text = "\n".join(lines) + "\n"
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
