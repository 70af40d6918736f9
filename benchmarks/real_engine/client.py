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
import random
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bubblewatch.sources.engine_metrics import EngineMetricsReader

PROMPT = "the engine schedules micro batches so that every stage has work to do"
MAX_TOKENS = 64
# Each request's output length, drawn uniformly (seeded per client thread, so the
# unchanged engine and a fix get the same sequence): requests of one length started
# together end together and keep their split over the micro-batches request after
# request, a state that holds for many seconds. On the machine alone, C = 4 of 64
# tokens each read 43-233 tok/s in runs 6 s long, p50 1.1 s or 5.2 s by the state.
OUTPUT_TOKENS = (MAX_TOKENS // 2, MAX_TOKENS * 3 // 2)
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    tokens: int
    latencies_s: list[float]
    errors: list[str]
    # (read's start and end, t_monotonic; the fewest and the most requests the client had
    # in flight while the read was under way; engine running, engine waiting)
    counts: list[tuple[float, float, int, int, float | None, float | None]] = field(
        default_factory=list
    )
    # rank -> [(t_monotonic, utime_s, stime_s)]
    cpu: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)
    metric_failures: dict[str, int] = field(default_factory=dict)
    t0: float = 0.0
    t1: float = 0.0
    # The engine's own count of tokens generated over the steady window (C in flight, from
    # the first requests to the load's end, before the last ones drain), and its length.
    engine_tokens: float | None = None
    window_s: float = 0.0

    @property
    def client_tok_per_s(self) -> float:
        """Tokens of completed requests over the whole run, drain included."""
        return self.tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def tok_per_s(self) -> float:
        """The engine's tokens per second over the steady window (the client's if unread).

        A request's 64 tokens count at its end on the client's side: in a 10 s run at
        C = 1 that is a handful of requests, and where the run's end cuts the last one
        moves the figure by a fifth. The engine's counter counts each token when made.
        """
        if self.engine_tokens is not None and self.window_s > 0:
            return self.engine_tokens / self.window_s
        return self.client_tok_per_s

    def latency_pct(self, q: float) -> float | None:
        if not self.latencies_s:
            return None
        xs = sorted(self.latencies_s)
        return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))]


def proc_cpu_s(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS_PER_S, int(fields[12]) / TICKS_PER_S


def generated_tokens(url: str, timeout_s: float = 5.0) -> float | None:
    """`vllm:generation_tokens_total` from the engine's /metrics (summed over its series)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=timeout_s) as r:
            text = r.read().decode(errors="replace")
    except OSError:
        return None
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:generation_tokens_total")
    ]
    return sum(values) if values else None


def _run(
    res: LoadResult,
    url: str,
    watchers: list[threading.Thread],
    threads: list[threading.Thread],
    stop_at: float,
    done: threading.Event,
) -> None:
    """Start the watchers and the clients, read the engine's token count over the steady
    window (to `stop_at`), let the last requests drain, then stop the watchers."""
    g0 = generated_tokens(url)
    res.t0 = time.monotonic()
    for th in watchers:
        th.start()
    for th in threads:
        th.start()
    done.wait(max(0.0, stop_at - time.monotonic()))
    g1 = generated_tokens(url)
    res.window_s = time.monotonic() - res.t0
    if g0 is not None and g1 is not None:
        res.engine_tokens = g1 - g0
    for th in threads:
        th.join(timeout=(stop_at - res.t0) + 180.0)
    res.t1 = time.monotonic()
    done.set()
    for th in watchers:
        th.join(timeout=10.0)
    res.duration_s = res.t1 - res.t0


def complete(url: str, model: str, timeout_s: float = 120.0, max_tokens: int = MAX_TOKENS) -> int:
    body = json.dumps(
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": max_tokens,
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

    def worker(i: int) -> None:
        rng = random.Random(f"{concurrency}-{i}")
        while time.monotonic() < stop_at:
            t = time.monotonic()
            with lock:
                in_flight[0] += 1
                span[1] = max(span[1], in_flight[0])
            try:
                n = complete(url, model, max_tokens=rng.randint(*OUTPUT_TOKENS))
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
        if (sample := reading.sample) is not None:
            res.counts.append((now, time.monotonic(), lo, hi, sample.running, sample.queued))

    # Two watchers: a slow /metrics answer (up to its 2 s timeout) never holds up the CPU
    # samples the stand-in is made of.
    watchers = [
        threading.Thread(target=every, args=(f,), daemon=True) for f in (sample_cpu, read_metrics)
    ]
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    _run(res, url, watchers, threads, stop_at, done)
    res.metric_failures = reader.failures
    return res
