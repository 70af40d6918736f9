"""Load on the real engine from a stdlib client, and what is watched while it runs.

`drive()` keeps C requests in flight (closed loop: each of C threads sends its
next request when its last one answers) for a fixed time. Meanwhile, every
`poll_s`, one watcher thread reads the engine's `/metrics` through
bubblewatch's own load reader (`EngineMetricsReader`, the daemon's) beside
the fewest and the most requests the client had in flight while that read was
under way (a read takes up to a second on a loaded machine), and another
reads the worker processes' CPU times from `/proc/PID/stat` (user and system
separately: the CPU build's wait for the next message is a `sched_yield`
loop).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bubblewatch.sources.engine_metrics import EngineMetricsReader

PROMPT = "the engine schedules micro batches so that every stage has work to do"
MAX_TOKENS = 64
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    tokens: int
    latencies_s: list[float]
    errors: list[str]
    # (t_monotonic, the fewest and the most requests the client had in flight while the
    # read was under way, engine running, engine waiting)
    counts: list[tuple[float, int, int, float | None, float | None]] = field(default_factory=list)
    # rank -> [(t_monotonic, utime_s, stime_s)]
    cpu: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)
    metric_failures: dict[str, int] = field(default_factory=dict)
    t0: float = 0.0
    t1: float = 0.0

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.duration_s if self.duration_s > 0 else 0.0

    def latency_pct(self, q: float) -> float | None:
        if not self.latencies_s:
            return None
        xs = sorted(self.latencies_s)
        return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))]


def proc_cpu_s(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS_PER_S, int(fields[12]) / TICKS_PER_S


def complete(url: str, model: str, timeout_s: float = 120.0) -> int:
    body = json.dumps(
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "temperature": 0.0,
        }
    ).encode()
    req = urllib.request.Request(
        url + "/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return int(json.load(r)["usage"]["completion_tokens"])


def drive(
    url: str,
    model: str,
    concurrency: int,
    duration_s: float,
    *,
    ranks: Mapping[int, int],
    poll_s: float = 0.2,
) -> LoadResult:
    """C requests in flight for `duration_s`; `ranks` maps a pipeline rank to its pid."""
    res = LoadResult(concurrency, 0.0, 0, [], [])
    lock = threading.Lock()
    in_flight = [0]
    span = [0, 0]  # fewest and most in flight since the watcher's last mark
    stop_at = time.monotonic() + duration_s
    done = threading.Event()

    def worker() -> None:
        while time.monotonic() < stop_at:
            t = time.monotonic()
            with lock:
                in_flight[0] += 1
                span[1] = max(span[1], in_flight[0])
            try:
                n = complete(url, model)
            except Exception as e:  # a refused or failed request is a finding, kept
                with lock:
                    res.errors.append(f"{type(e).__name__}: {e}")
                n = -1
            finally:
                with lock:
                    in_flight[0] -= 1
                    span[0] = min(span[0], in_flight[0])
            if n >= 0:
                with lock:
                    res.tokens += n
                    res.latencies_s.append(time.monotonic() - t)

    reader = EngineMetricsReader(url + "/metrics", timeout_s=2.0)

    def every(poll: Callable[[float], None]) -> None:
        next_t = time.monotonic()
        while not done.is_set():
            poll(time.monotonic())
            next_t += poll_s
            done.wait(max(0.0, next_t - time.monotonic()))

    def sample_cpu(now: float) -> None:
        for rank, pid in ranks.items():
            try:
                u, s = proc_cpu_s(pid)
            except OSError:
                continue
            res.cpu.setdefault(rank, []).append((now, u, s))

    def read_metrics(now: float) -> None:
        with lock:
            span[0] = span[1] = in_flight[0]
        reading = reader.read()
        with lock:
            lo, hi = span
        if reading.sample is not None:
            res.counts.append((now, lo, hi, reading.sample.running, reading.sample.queued))

    # Two watchers: a slow /metrics answer (up to its 2 s timeout) never holds up the CPU
    # samples the stand-in is made of.
    watchers = [
        threading.Thread(target=every, args=(f,), daemon=True) for f in (sample_cpu, read_metrics)
    ]
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    res.t0 = time.monotonic()
    for th in watchers:
        th.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=duration_s + 180.0)
    res.t1 = time.monotonic()
    done.set()
    for th in watchers:
        th.join(timeout=10.0)
    res.duration_s = res.t1 - res.t0
    res.metric_failures = reader.failures
    return res
