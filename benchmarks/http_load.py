"""The metrics endpoint under load, next to node_exporter's on the same machine.

Starts `bubblewatch run` (a simulated pp8 pipeline) and node_exporter (Debian
package `prometheus-node-exporter`, default `--web.max-requests=40`) on
loopback, one after the other, and measures each the same way:

- parallel: 200 scrapes of /metrics, each on a new connection, released at
  once; how many got 200, how many a 503, how many failed (no answer within
  30 s), and the latency from connect to the last byte (p50, p99, max);
- slow clients: 1500 connections that send half a request head and then
  nothing, while a scraper asks every 0.1 s; the scrapes' latency and the
  server's threads and resident memory with the slow clients connected;
- keep-alive: 50 scrapes on one connection, median latency.

    python benchmarks/http_load.py                     # both servers
    python benchmarks/http_load.py --only bubblewatch  # one
    python benchmarks/http_load.py --bubblewatch-src /path/to/other/checkout

The client is Python threads in this process: both servers face the same
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


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int

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


def wait_up(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if raw_get(port, 2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("server did not come up")


def start_bubblewatch(tmp: Path, src: str | None) -> Server:
    port = free_port()
    cfg = tmp / "bubblewatch.yml"
    cfg.write_text(
        f"web: {{listen_address: '127.0.0.1:{port}'}}\n"
        f"alerting: {{state_dir: '{tmp / 'state'}'}}\nlog: {{level: warning}}\n"
        "simulate: pp8-serialized\n"
    )
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    with open(tmp / "bubblewatch.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bubblewatch", "run", "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=tmp,
        )  # fmt: skip
    wait_up(port, proc)
    return Server("bubblewatch", proc, port)


def start_node_exporter(tmp: Path) -> Server:
    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        raise SystemExit("apt-get install prometheus-node-exporter")
    port = free_port()
    with open(tmp / "node_exporter.log", "wb") as log:
        proc = subprocess.Popen(
            [exe, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log
        )
    wait_up(port, proc)
    return Server("node_exporter", proc, port)


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
    f = Figures()
    f.keepalive_ms, f.body_bytes = keepalive(server)
    f.parallel = parallel(server)
    time.sleep(1.0)
    f.slow = slow_clients(server)
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("bubblewatch", "node_exporter"))
    ap.add_argument("--bubblewatch-src", help="PYTHONPATH of another bubblewatch checkout")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * SLOW
    if soft < want:  # this client and (inherited) the servers need room for the slow clients
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    out: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="bw-http-") as d:
        tmp = Path(d)
        starters = {
            "bubblewatch": lambda: start_bubblewatch(tmp, args.bubblewatch_src),
            "node_exporter": lambda: start_node_exporter(tmp),
        }
        for name, start in starters.items():
            if args.only and name != args.only:
                continue
            server = start()
            try:
                out[name] = measure(server)
            finally:
                server.proc.terminate()
                server.proc.wait(15)
    if args.json:
        print(json.dumps({k: v.__dict__ for k, v in out.items()}, indent=2))
        return 0
    print(f"{'':34s}" + "".join(f"{n:>16s}" for n in out))
    rows = [
        ("/metrics body (bytes)", lambda f: f"{f.body_bytes:d}"),
        ("keep-alive scrape, median (ms)", lambda f: f"{f.keepalive_ms:.1f}"),
        (f"{PARALLEL} parallel: 200 / 503 / failed",
         lambda f: f"{f.parallel['200']:.0f}/{f.parallel['503']:.0f}/{f.parallel['failed']:.0f}"),
        ("  latency p50 / p99 (s)",
         lambda f: f"{f.parallel['p50_s']:.3f}/{f.parallel['p99_s']:.3f}"),
        ("  latency max (s)", lambda f: f"{f.parallel['max_s']:.3f}"),
        (f"{SLOW} slow clients: connected", lambda f: f"{f.slow['connected']:.0f}"),
        ("  time to connect them all (s)", lambda f: f"{f.slow['connect_all_s']:.2f}"),
        ("  scrapes meanwhile / errors",
         lambda f: f"{f.slow['scrapes']:.0f}/{f.slow['scrape_errors']:.0f}"),
        ("  scrape p50 / max (s)",
         lambda f: f"{f.slow['scrape_p50_s']:.3f}/{f.slow['scrape_max_s']:.3f}"),
        ("  server threads, RSS (MB)",
         lambda f: f"{f.slow['server_threads']:.0f}, {f.slow['server_rss_mb']:.0f}"),
    ]  # fmt: skip
    for label, fmt in rows:
        print(f"{label:34s}" + "".join(f"{fmt(f):>16s}" for f in out.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
