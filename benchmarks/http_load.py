"""The metrics endpoint under load: ours, uvicorn's and node_exporter's on the same machine.

Starts `bubblewatch run` (a simulated pp8 pipeline) with our endpoint, the
same daemon with the uvicorn endpoint (`BUBBLEWATCH_HTTP_SERVER=uvicorn`),
and node_exporter (Debian package `prometheus-node-exporter`, default
`--web.max-requests=40`) on loopback, one after the other, and measures each
the same way:

- parallel: 200 scrapes of /metrics, each on a new connection, released at
  once; how many got 200, how many a 503, how many failed (no answer within
  30 s), and the latency from connect to the last byte (p50, p99, max);
- slow clients: 1500 connections that send half a request head and then
  nothing, while a scraper asks every 0.1 s; the scrapes' latency and the
  server's threads and resident memory with the slow clients connected;
- keep-alive: 50 scrapes on one connection, median latency.

With `--rounds N` the servers take turns N times (the order reversed every
other round, so drift on a shared machine falls on both); each figure is the
median over the rounds, and the ratio column is the median of the rounds'
uvicorn / ours ratios (paired, round by round).

    python benchmarks/http_load.py                     # all three, one round
    python benchmarks/http_load.py --only bubblewatch uvicorn --rounds 3
    python benchmarks/http_load.py --bubblewatch-src /path/to/other/checkout

The client is Python threads in this process: every server faces the same
client, so the figures compare; absolute latencies include the client's own
cost on a small machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PARALLEL = 200
SLOW = 1500
SERVERS = ("bubblewatch", "uvicorn", "node_exporter")


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    start_s: float  # from the process's start to its first 200 on /metrics

    def threads_rss(self) -> tuple[int, float]:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        kv = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return int(kv["Threads"]), int(kv["VmRSS"].split()[0]) / 1024


@dataclass
class Figures:
    parallel: dict[str, float] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)
    keepalive_ms: float = 0.0
    body_bytes: int = 0
    start_s: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_get(port: int, timeout_s: float) -> tuple[int, float, int]:
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = bytearray()
        while chunk := s.recv(1 << 16):
            data += chunk
    return int(data.split(b" ", 2)[1]), time.perf_counter() - t0, len(data)


def wait_up(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> float:
    """Seconds from now until the server answers /metrics with 200."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if raw_get(port, 2)[0] == 200:
                return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("server did not come up")


def start_bubblewatch(tmp: Path, src: str | None, endpoint: str) -> Server:
    """The daemon with `endpoint` ("builtin" or "uvicorn") serving its metrics."""
    port = free_port()
    cfg = tmp / "bubblewatch.yml"
    cfg.write_text(
        f"web: {{listen_address: '127.0.0.1:{port}'}}\n"
        f"alerting: {{state_dir: '{tmp / 'state'}'}}\nlog: {{level: warning}}\n"
        "simulate: pp8-serialized\n"
    )
    env = dict(os.environ, BUBBLEWATCH_HTTP_SERVER=endpoint)
    if src:
        env["PYTHONPATH"] = src
    with open(tmp / "bubblewatch.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bubblewatch", "run", "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=tmp,
        )  # fmt: skip
    start_s = wait_up(port, proc)
    return Server("bubblewatch" if endpoint == "builtin" else endpoint, proc, port, start_s)


def start_node_exporter(tmp: Path) -> Server:
    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        raise SystemExit("apt-get install prometheus-node-exporter")
    port = free_port()
    with open(tmp / "node_exporter.log", "wb") as log:
        proc = subprocess.Popen(
            [exe, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log
        )
    start_s = wait_up(port, proc)
    return Server("node_exporter", proc, port, start_s)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, round(q * (len(v) - 1)))] if v else float("nan")


def parallel(server: Server) -> dict[str, float]:
    results: list[tuple[int, float, int] | None] = []
    lock = threading.Lock()
    barrier = threading.Barrier(PARALLEL)

    def one() -> None:
        barrier.wait()
        try:
            r: tuple[int, float, int] | None = raw_get(server.port, 30)
        except OSError:
            r = None
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one) for _ in range(PARALLEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ok = [r for r in results if r is not None]
    times = [r[1] for r in ok]
    return {
        "200": sum(1 for r in ok if r[0] == 200),
        "503": sum(1 for r in ok if r[0] == 503),
        "failed": PARALLEL - len(ok),
        "p50_s": pct(times, 0.5),
        "p99_s": pct(times, 0.99),
        "max_s": max(times, default=float("nan")),
    }


def slow_clients(server: Server) -> dict[str, float]:
    times: list[float] = []
    errors = [0]
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            try:
                status, took, _ = raw_get(server.port, 10)
                times.append(took if status == 200 else float("inf"))
            except OSError:
                errors[0] += 1
            done.wait(0.1)

    t = threading.Thread(target=scrape)
    t.start()
    socks = []
    t0 = time.perf_counter()
    try:
        for _ in range(SLOW):
            try:
                s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                errors[0] += 1
        connect_s = time.perf_counter() - t0
        time.sleep(2.0)
        threads, rss = server.threads_rss()
    finally:
        done.set()
        t.join(30)
        for s in socks:
            s.close()
    return {
        "connected": len(socks),
        "connect_all_s": connect_s,
        "scrapes": len(times),
        "scrape_errors": errors[0],
        "scrape_p50_s": pct(times, 0.5),
        "scrape_max_s": max(times, default=float("nan")),
        "server_threads": threads,
        "server_rss_mb": rss,
    }


def keepalive(server: Server) -> tuple[float, int]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    times, size = [], 0
    try:
        for _ in range(50):
            t0 = time.perf_counter()
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            size = len(resp.read())
            times.append(time.perf_counter() - t0)
    finally:
        conn.close()
    return statistics.median(times) * 1000, size


def measure(server: Server) -> Figures:
    f = Figures(start_s=server.start_s)
    f.keepalive_ms, f.body_bytes = keepalive(server)
    f.parallel = parallel(server)
    time.sleep(1.0)
    f.slow = slow_clients(server)
    return f


def flat(f: Figures) -> dict[str, float]:
    """Every figure of one measurement under one name."""
    out = {"start_s": f.start_s, "keepalive_ms": f.keepalive_ms, "body_bytes": float(f.body_bytes)}
    out.update({f"parallel_{k}": v for k, v in f.parallel.items()})
    out.update({f"slow_{k}": v for k, v in f.slow.items()})
    return out


ROWS = [
    ("start to first 200 on /metrics (s)", "{start_s:.2f}", ("start_s",)),
    ("/metrics body (bytes)", "{body_bytes:.0f}", ("body_bytes",)),
    ("keep-alive scrape, median (ms)", "{keepalive_ms:.1f}", ("keepalive_ms",)),
    (f"{PARALLEL} parallel: 200 / 503 / failed",
     "{parallel_200:.0f}/{parallel_503:.0f}/{parallel_failed:.0f}", ("parallel_200",)),
    ("  latency p50 / p99 (s)", "{parallel_p50_s:.3f}/{parallel_p99_s:.3f}",
     ("parallel_p50_s", "parallel_p99_s")),
    ("  latency max (s)", "{parallel_max_s:.3f}", ("parallel_max_s",)),
    (f"{SLOW} slow clients: connected", "{slow_connected:.0f}", ("slow_connected",)),
    ("  time to connect them all (s)", "{slow_connect_all_s:.2f}", ("slow_connect_all_s",)),
    ("  scrapes meanwhile / errors", "{slow_scrapes:.0f}/{slow_scrape_errors:.0f}",
     ("slow_scrapes",)),
    ("  scrape p50 / max (s)", "{slow_scrape_p50_s:.3f}/{slow_scrape_max_s:.3f}",
     ("slow_scrape_p50_s", "slow_scrape_max_s")),
    ("  server threads, RSS (MB)", "{slow_server_threads:.0f}, {slow_server_rss_mb:.0f}",
     ("slow_server_threads", "slow_server_rss_mb")),
]  # fmt: skip


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def paired_ratio(ours: list[dict[str, float]], theirs: list[dict[str, float]], key: str) -> float:
    """Median over rounds of theirs / ours for `key` (nan where ours is 0)."""
    ratios = [t[key] / o[key] for o, t in zip(ours, theirs, strict=True) if o[key]]
    return statistics.median(ratios) if ratios else float("nan")


def table(out: dict[str, list[dict[str, float]]]) -> list[str]:
    names = list(out)
    pair = "bubblewatch" in out and "uvicorn" in out
    head = f"{'':34s}" + "".join(f"{n:>16s}" for n in names)
    lines = [head + (f"{'uvicorn / ours':>22s}" if pair else "")]
    mids = {n: medians(rs) for n, rs in out.items()}
    for label, fmt, keys in ROWS:
        line = f"{label:34s}" + "".join(f"{fmt.format(**mids[n]):>16s}" for n in names)
        if pair:
            ratios = [paired_ratio(out["bubblewatch"], out["uvicorn"], k) for k in keys]
            line += f"{' / '.join(f'{r:.2f}' for r in ratios):>22s}"
        lines.append(line)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", choices=SERVERS, default=list(SERVERS))
    ap.add_argument("--rounds", type=int, default=1, help="turns each server takes (paired)")
    ap.add_argument("--bubblewatch-src", help="PYTHONPATH of another bubblewatch checkout")
    ap.add_argument("--json", metavar="PATH", help="also write every round's figures there")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * SLOW
    if soft < want:  # this client and (inherited) the servers need room for the slow clients
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    names = [n for n in SERVERS if n in args.only]
    out: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="bw-http-") as d:
        tmp = Path(d)
        starters = {
            "bubblewatch": lambda: start_bubblewatch(tmp, args.bubblewatch_src, "builtin"),
            "uvicorn": lambda: start_bubblewatch(tmp, args.bubblewatch_src, "uvicorn"),
            "node_exporter": lambda: start_node_exporter(tmp),
        }
        for i in range(args.rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                server = starters[name]()
                try:
                    out[name].append(flat(measure(server)))
                finally:
                    server.proc.terminate()
                    server.proc.wait(15)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print("\n".join(table(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
