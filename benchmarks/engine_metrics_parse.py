"""CPU per read of an engine's /metrics page: before (whole-page parse) and after, paired.

`parse_load_figures(text)` is what `EngineMetricsReader.read()` does with each
answer. "before" is the same function reading the samples through
`prometheus_client`'s parser over the whole page (`exposition_samples`, what it
did up to the change); "after" is the function as it is (`samples_named`: only
the wanted families, the parser whole for a page outside the common shape).
Both run in one process, interleaved in rounds so that other load on the
machine falls on both alike; the figure is the median over rounds of
`time.process_time()` per read.

Pages: the real vLLM 0.32 CPU engine's page (tests/fixtures/engine_metrics/,
66 KB), the same page with CRLF line ends (outside the common shape: the
fallback, which must cost what "before" cost), and an SGLang PP8 x TP8 page
(64 schedulers' series of six gauges).

    python benchmarks/engine_metrics_parse.py [--rounds 15] [--reads 20] [--out FILE]
    python benchmarks/engine_metrics_parse.py --wall [--out FILE]

`--wall` measures instead the wall time of whole `EngineMetricsReader.read()`
calls (`timeout_s=2.0`) against a local server in another process that answers
the real page late (after 1.9, 2.5, 3.3 or 4.7 s, as the real engine's API
server did on this machine) or trickles it (1 KB per 0.1 s: 6.6 s in all).
"""

from __future__ import annotations

import argparse
import itertools
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from _report import emit

from bubblewatch.sources import engine_metrics
from bubblewatch.sources._exposition import exposition_samples

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "engine_metrics" / "vllm-0.32-cpu.txt"


def sglang_page(pp: int = 8, tp: int = 8) -> str:
    lines = []
    for gauge in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "token_usage",
                  "cache_hit_rate", "num_used_tokens"):  # fmt: skip
        lines += [f"# HELP sglang:{gauge} {gauge}.", f"# TYPE sglang:{gauge} gauge"]
        lines += [
            f'sglang:{gauge}{{model_name="moonshotai/Kimi-K2",pp_rank="{p}",tp_rank="{t}"}} 7.0'
            for p in range(pp)
            for t in range(tp)
        ]
    return "\n".join(lines) + "\n"


@contextmanager
def before() -> Iterator[None]:
    """parse_load_figures as it was: every sample through prometheus_client's parser."""
    fast = engine_metrics.samples_named
    engine_metrics.samples_named = exposition_samples
    try:
        yield
    finally:
        engine_metrics.samples_named = fast


def cpu_per_read_s(text: str, reads: int) -> float:
    parse: Callable[[str], object] = engine_metrics.parse_load_figures
    t0 = time.process_time()
    for _ in range(reads):
        parse(text)
    return (time.process_time() - t0) / reads


def measure(text: str, rounds: int, reads: int) -> tuple[float, float]:
    with before():
        want = engine_metrics.parse_load_figures(text)
    if engine_metrics.parse_load_figures(text) != want:
        raise SystemExit("the two readers disagree: not a fair comparison")
    old, new = [], []
    for _ in range(rounds):
        with before():
            old.append(cpu_per_read_s(text, reads))
        new.append(cpu_per_read_s(text, reads))
    return statistics.median(old), statistics.median(new)


def serve(mode: str, port_file: Path, run_s: float) -> None:
    """The slow engine: each answer late, or trickled (run in a process of its own)."""
    page = REAL.read_bytes()
    data = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(page) + page
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    port_file.write_text(str(srv.getsockname()[1]))
    delays = itertools.cycle([1.9, 2.5, 3.3, 4.7])

    def answer(conn: socket.socket, delay_s: float) -> None:
        with conn:
            try:
                conn.recv(65536)
                if mode == "late":
                    time.sleep(delay_s)
                    conn.sendall(data)
                    return
                for i in range(0, len(data), 1024):
                    conn.sendall(data[i : i + 1024])
                    time.sleep(0.1)
            except OSError:
                pass  # the reader gave up: what is measured

    end = time.monotonic() + run_s
    while time.monotonic() < end:
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        threading.Thread(target=answer, args=(conn, next(delays)), daemon=True).start()


def wall(out: Path | None, reads: int = 8, timeout_s: float = 2.0) -> None:
    lines = [
        f"EngineMetricsReader.read() wall, timeout_s={timeout_s:g}, {reads} reads per server",
        "",
        "| server | longest | median | reads timed out |",
        "|---|---|---|---|",
    ]
    for mode in ("late", "trickle"):
        port_file = Path(f"/tmp/bubblewatch-bench-port-{mode}-{time.time_ns()}")
        run_s = reads * (timeout_s + 1.0) + 10.0
        cmd = [sys.executable, __file__, "--serve", mode, str(port_file), str(run_s)]
        with subprocess.Popen(cmd) as proc:
            try:
                while not port_file.exists() or not port_file.read_text():
                    time.sleep(0.05)
                url = f"http://127.0.0.1:{port_file.read_text()}/metrics"
                reader = engine_metrics.EngineMetricsReader(url, timeout_s=timeout_s)
                took = []
                for _ in range(reads):
                    t0 = time.monotonic()
                    reader.read()
                    took.append(time.monotonic() - t0)
            finally:
                proc.kill()
                port_file.unlink(missing_ok=True)
        timed_out = reader.failures.get("timeout", 0)
        lines.append(
            f"| {mode} | {max(took):.2f} s | {statistics.median(took):.2f} s "
            f"| {timed_out} of {reads} |"
        )
    emit(lines, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--wall", action="store_true", help="wall time of whole reads instead")
    ap.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], Path(args.serve[1]), float(args.serve[2]))
        return 0
    if args.wall:
        wall(args.out)
        return 0
    real = REAL.read_text()
    pages = {
        f"vLLM 0.32 CPU, real ({len(real.encode()) / 1000:.0f} KB)": real,
        "the same, CRLF (fallback)": real.replace("\n", "\r\n"),
        "SGLang PP8 x TP8, 6 gauges (synthetic)": sglang_page(),
    }
    lines = [
        f"parse_load_figures CPU per read, median of {args.rounds} rounds x {args.reads} reads",
        "",
        "| page | before | after | before/after |",
        "|---|---|---|---|",
    ]
    for label, text in pages.items():
        old, new = measure(text, args.rounds, args.reads)
        lines.append(f"| {label} | {old * 1e3:.2f} ms | {new * 1e3:.2f} ms | {old / new:.1f}x |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
