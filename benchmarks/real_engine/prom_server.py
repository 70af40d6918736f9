"""What the Prometheus-history check (prom_history.py) runs: the stand-in exporter and Prometheus.

`StandinExporter` serves the CPU stand-in (standin.py) as a GPU exporter
would (dcgm-exporter's names and labels, one GPU per pipeline rank);
`prometheus(workdir, targets)` runs a real `prometheus` scraping given
targets every `SCRAPE_INTERVAL_S`; `api`, `wait_targets_up`, `raw_samples`
and `at_or_before` read its HTTP API back.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import standin
from client import proc_cpu_s

PROMETHEUS = shutil.which("prometheus")
SCRAPE_INTERVAL_S = 1.0
READY_TIMEOUT_S = 30.0
TARGETS_TIMEOUT_S = 60.0

CpuReader = Callable[[int], tuple[float, float]]


def exposition(rows: Mapping[int, tuple[int, float, float]], host: str) -> str:
    """dcgm-exporter's text for rank -> (pid, sm_active_ratio, kernel_busy_ratio)."""
    sm = ["# HELP DCGM_FI_PROF_SM_ACTIVE Stand-in: worker user CPU share less its spin."]
    sm.append("# TYPE DCGM_FI_PROF_SM_ACTIVE gauge")
    util = ["# HELP DCGM_FI_DEV_GPU_UTIL Stand-in: worker user + system CPU share (in %)."]
    util.append("# TYPE DCGM_FI_DEV_GPU_UTIL gauge")
    for rank in sorted(rows):
        pid, active, busy = rows[rank]
        labels = (
            f'gpu="{rank}",UUID="STANDIN-CPU-rank{rank}-pid{pid}",'
            f'modelName="CPU worker, pipeline rank {rank} (stand-in)",Hostname="{host}"'
        )
        sm.append(f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {active:.6f}")
        util.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {100.0 * busy:.4f}")
    return "\n".join(sm + util) + "\n"


class StandinExporter:
    """The stand-in's per-rank ratios over each scrape's interval, served on loopback."""

    def __init__(
        self,
        ranks: Mapping[int, int],
        *,
        spin: Mapping[int, float] | None = None,
        read_cpu: CpuReader = proc_cpu_s,
        clock: Callable[[], float] = time.monotonic,
        host: str = "standin",
    ) -> None:
        self.ranks = dict(ranks)
        self.spin = dict(spin or {})
        self.read_cpu = read_cpu
        self.clock = clock
        self.host = host
        self._last: dict[int, tuple[float, float, float]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def scrape(self) -> str:
        """The text of one scrape; a rank appears from its second reading on (no interval yet)."""
        rows = {}
        with self._lock:
            for rank, pid in self.ranks.items():
                try:
                    u, s = self.read_cpu(pid)
                except OSError:
                    continue  # the worker is gone: its series is absent, not zero
                now = self.clock()
                prev = self._last.get(rank)
                self._last[rank] = (now, u, s)
                if prev is None or now <= prev[0]:
                    continue
                active, busy = standin.ratios(
                    u - prev[1], s - prev[2], now - prev[0], self.spin.get(rank, 0.0)
                )
                rows[rank] = (pid, active, busy)
        return exposition(rows, self.host)

    @property
    def target(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> str:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.scrape().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.target

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._server = self._thread = None


def prometheus_config(targets: Mapping[str, str], interval_s: float = SCRAPE_INTERVAL_S) -> str:
    """Prometheus' YAML: one job per name -> host:port, scraped every `interval_s`."""
    lines = [
        "global:",
        f"  scrape_interval: {interval_s:g}s",
        f"  scrape_timeout: {interval_s:g}s",
        "scrape_configs:",
    ]
    for job, target in targets.items():
        lines += [
            f"  - job_name: {json.dumps(job)}",
            "    static_configs:",
            f"      - targets: [{json.dumps(target)}]",
        ]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(url: str, path: str, params: Mapping[str, str] | None = None) -> Any:
    """The `data` of a Prometheus API answer; RuntimeError with the server's error otherwise."""
    query = "?" + urllib.parse.urlencode(params) if params else ""
    with urllib.request.urlopen(url + path + query, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body.get('error', body)}")
    return body["data"]


@contextlib.contextmanager
def prometheus(workdir: Path, targets: Mapping[str, str]) -> Iterator[str]:
    """A real Prometheus scraping `targets` (job -> host:port); yields its URL, always stops it."""
    if PROMETHEUS is None:
        raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
    shutil.rmtree(workdir / "data", ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(prometheus_config(targets))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (workdir / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    tail = (workdir / "prometheus.log").read_text()[-1500:]
                    raise RuntimeError(f"prometheus exited with {proc.returncode}: {tail}")
                with contextlib.suppress(OSError), urllib.request.urlopen(url + "/-/ready") as r:
                    if r.status == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"prometheus not ready within {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def wait_targets_up(url: str, jobs: Sequence[str], timeout_s: float = TARGETS_TIMEOUT_S) -> str:
    """Wait until every job's target was scraped successfully; '' or what is still down."""
    deadline = time.monotonic() + timeout_s
    while True:
        active = api(url, "/api/v1/targets")["activeTargets"]
        health = {t["labels"]["job"]: (t["health"], t.get("lastError", "")) for t in active}
        down = [
            f"{j} ({health.get(j, ('missing', ''))})"
            for j in jobs
            if health.get(j, ("",))[0] != "up"
        ]
        if not down:
            return ""
        if time.monotonic() > deadline:
            return ", ".join(down)
        time.sleep(0.5)


def raw_samples(url: str, expr: str, a_s: float, b_s: float) -> list[tuple[float, float]]:
    """The scraped samples of one series in [a_s, b_s], as Prometheus stored them."""
    span_ms = round((b_s - a_s) * 1000)
    data = api(url, "/api/v1/query", {"query": f"{expr}[{span_ms}ms]", "time": f"{b_s:.3f}"})
    if not data["result"]:
        return []
    return [(float(t), float(v)) for t, v in data["result"][0]["values"]]


def at_or_before(samples: Sequence[tuple[float, float]], t_s: np.ndarray) -> np.ndarray:
    """The value of the last sample at or before each time (NaN before the first)."""
    if not samples:
        return np.full(len(t_s), np.nan)
    ts = np.array([t for t, _ in samples])
    vs = np.array([v for _, v in samples])
    k = np.searchsorted(ts, t_s, side="right") - 1
    return np.where(k >= 0, vs[np.clip(k, 0, None)], np.nan)
