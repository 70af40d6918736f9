"""A synthetic Prometheus over real HTTP: any number of hosts, GPUs and days, nothing stored.

A real Prometheus needs its data backfilled (promserver.py), which is slow for
a day of 64 GPUs. This server computes every answer from a formula instead:
dcgm-exporter's series for `hosts` x `gpus_per_host` GPUs, scraped every
`scrape_s` from `start_s` to `end_s`, a serialized PP pipeline (one GPU busy
at a time, in turn). It answers `/api/v1/series` and `/api/v1/query_range`
for `NAME{matchers}` and `avg_over_time(NAME{matchers}[Nms])` in Prometheus's
own JSON layout, honours `=`, `!=`, `=~`, `!~` matchers and the 11,000-point
limit, and counts the queries it serves, the points in each answer and the
most queries in flight at once, so tests can check how a client cut its work.

Run alone (`python tests/history/fakeprom.py --hosts 8 ...`) it prints its URL
and serves until killed: the scale benchmark uses it so.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

MODEL = "NVIDIA H100 80GB HBM3"
MAX_POINTS = 11_000
# name -> (busy value, idle value): the busy GPU reads the first.
SERIES = {
    "DCGM_FI_DEV_POWER_USAGE": (420.0, 150.0),
    "DCGM_FI_PROF_SM_ACTIVE": (0.82, 0.02),
    "DCGM_FI_DEV_GPU_UTIL": (98.0, 96.0),
    "DCGM_FI_DEV_SM_CLOCK": (1980.0, 1980.0),
    "DCGM_FI_DEV_GPU_TEMP": (61.0, 48.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (0.0, 0.0),
}
_SELECTOR = re.compile(
    r"^(?:avg_over_time\()?([A-Za-z_:][A-Za-z0-9_:]*)\{(.*?)\}(?:\[(\d+)ms\]\))?$"
)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass
class Stats:
    """What the server saw: each query's points answered, and the most in flight at once."""

    queries: list[tuple[str, int]] = field(default_factory=list)
    series_calls: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    fail_after: int | None = None  # answer range queries with HTTP 503 once this many were served
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Fleet:
    """The synthetic hosts and GPUs, and when they were scraped."""

    hosts: int
    gpus_per_host: int
    start_s: float
    end_s: float
    scrape_s: float = 1.0
    stage_s: float = 1.0  # each GPU of a host busy for this long, in turn

    def labels(self, name: str) -> list[dict[str, str]]:
        out = []
        for h in range(self.hosts):
            host = f"gpu-node-{h:03d}"
            for g in range(self.gpus_per_host):
                out.append(
                    {
                        "__name__": name,
                        "gpu": str(g),
                        "UUID": f"GPU-{h:03d}-{g:04d}",
                        "modelName": MODEL,
                        "Hostname": host,
                        "instance": f"{host}:9400",
                        "job": "dcgm",
                    }
                )
        return out

    def values(self, name: str, gpu: int, t_s: np.ndarray) -> np.ndarray:
        """Each scrape's value at times `t_s` (on the scrape grid)."""
        busy_v, idle_v = SERIES[name]
        turn = np.floor((t_s - self.start_s) / self.stage_s).astype(np.int64) % self.gpus_per_host
        return np.where(turn == gpu, busy_v, idle_v)

    def answer(self, name: str, labels: Mapping[str, str], t_s: np.ndarray, window_ms: int | None):
        """(times, values) of one series at the query's steps; NaN where no scrape counts."""
        gpu = int(labels["gpu"])
        scrapes = np.floor((t_s - self.start_s) / self.scrape_s)
        if window_ms is None:  # the last scrape at or before t (within Prometheus's 5 min)
            k = scrapes
            ts = self.start_s + k * self.scrape_s
            ok = (k >= 0) & (ts <= self.end_s) & (t_s - ts <= 300.0)
            return t_s[ok], self.values(name, gpu, ts[ok])
        w = window_ms / 1000.0
        per = max(1, int(np.ceil(w / self.scrape_s)) + 1)
        k = scrapes[:, None] - np.arange(per)[None, :]
        ts = self.start_s + k * self.scrape_s
        inside = (k >= 0) & (ts > t_s[:, None] - w) & (ts <= self.end_s)
        vals = np.where(inside, self.values(name, gpu, ts), 0.0)
        n = inside.sum(axis=1)
        ok = n > 0
        return t_s[ok], vals.sum(axis=1)[ok] / n[ok]


def _matches(labels: Mapping[str, str], matchers: str) -> bool:
    pos = 0
    while pos < len(matchers):
        m = _MATCHER.match(matchers, pos)
        if m is None:
            raise ValueError(f"bad matchers {matchers!r}")
        name, op, raw = m.groups()
        value = raw.encode().decode("unicode_escape")
        have = labels.get(name, "")
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op == "=~" and not re.fullmatch(value, have):
            return False
        if op == "!~" and re.fullmatch(value, have):
            return False
        pos = m.end()
    return True


def _matrix(result: list[tuple[dict[str, str], np.ndarray, np.ndarray]]) -> bytes:
    parts = []
    for labels, t, v in result:
        pts = ",".join(f'[{a:.3f},"{b:.6g}"]' for a, b in zip(t.tolist(), v.tolist(), strict=True))
        parts.append(f'{{"metric":{json.dumps(labels, separators=(",", ":"))},"values":[{pts}]}}')
    body = '{"status":"success","data":{"resultType":"matrix","result":[' + ",".join(parts)
    return (body + "]}}").encode()


def _error(status: int, kind: str, text: str) -> tuple[int, bytes, int]:
    return status, json.dumps({"status": "error", "errorType": kind, "error": text}).encode(), 0


def handle(fleet: Fleet, path: str, query: Mapping[str, list[str]]) -> tuple[int, bytes, int]:
    """The HTTP status, body and number of points for one API request."""
    if path == "/api/v1/series":
        out = []
        for sel in query.get("match[]", []):
            m = _SELECTOR.match(sel)
            if m is None or m.group(3):
                return _error(400, "bad_data", f"cannot parse {sel!r}")
            if m.group(1) in SERIES:
                out += [lab for lab in fleet.labels(m.group(1)) if _matches(lab, m.group(2))]
        return 200, json.dumps({"status": "success", "data": out}).encode(), 0
    if path != "/api/v1/query_range":
        return _error(404, "not_found", path)
    q = query["query"][0]
    start, end, step = (float(query[k][0]) for k in ("start", "end", "step"))
    n = int(np.floor((end - start) / step + 1e-9)) + 1
    if n > MAX_POINTS:
        return _error(
            400,
            "bad_data",
            "exceeded maximum resolution of 11,000 points per timeseries. "
            "Try decreasing the query resolution (?step=XX)",
        )
    m = _SELECTOR.match(q)
    if m is None:
        return _error(400, "bad_data", f"parse error: cannot read {q!r}")
    name, matchers, window = m.group(1), m.group(2), m.group(3)
    t = start + np.arange(n) * step
    result = []
    for labels in fleet.labels(name) if name in SERIES else []:
        if _matches(labels, matchers):
            ts, vs = fleet.answer(name, labels, t, int(window) if window else None)
            if len(ts):
                shown = dict(labels)
                if window:
                    shown.pop("__name__")
                result.append((shown, ts, vs))
    return 200, _matrix(result), sum(len(t) for _, t, _ in result)


@contextmanager
def serve(fleet: Fleet, port: int = 0) -> Iterator[tuple[str, Stats]]:
    """Serve `fleet` on 127.0.0.1 in a thread; yields (URL, the server's Stats)."""
    stats = Stats()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            with stats.lock:
                stats.in_flight += 1
                stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
            try:
                failing = (
                    url.path == "/api/v1/query_range"
                    and stats.fail_after is not None
                    and len(stats.queries) >= stats.fail_after
                )
                if failing:
                    status, body, points = _error(503, "unavailable", "too busy")
                else:
                    status, body, points = handle(fleet, url.path, query)
            finally:
                with stats.lock:
                    stats.in_flight -= 1
            with stats.lock:
                if url.path == "/api/v1/series":
                    stats.series_calls += 1
                else:
                    stats.queries.append((query.get("query", [""])[0], points))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", stats
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument("--gpus-per-host", type=int, default=8)
    p.add_argument("--start", type=float, required=True)
    p.add_argument("--end", type=float, required=True)
    p.add_argument("--scrape", type=float, default=1.0)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    fleet = Fleet(a.hosts, a.gpus_per_host, a.start, a.end, a.scrape)
    with serve(fleet, a.port) as (url, _):
        print(url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
