"""The serving engine's own load, read from its Prometheus `/metrics` endpoint.

Running and queued requests tell an idle pipeline from a serialized one.

- SGLang (`--enable-metrics`, server port, default 30000): `sglang:num_running_reqs`
  and `sglang:num_queue_reqs` are exported per scheduler, labelled `tp_rank`,
  `pp_rank`, `moe_ep_rank` (0.5.2x), `dp_rank` and, with priority scheduling,
  `priority`. The ranks of one replica schedule the same requests, so
  bubblewatch takes the **maximum over tp_rank/pp_rank/moe_ep_rank** (and the
  attention ranks) within each remaining label set (one per data-parallel
  replica and priority) and **sums** those. With pipeline parallelism the
  gauge is the size of the micro-batch the scheduler last logged
  (`metrics_reporter.py`: `num_running_reqs = len(batch.reqs)` of the slot's
  running batch, 0.5.7-0.5.23), not all running requests: the reading then
  carries it as `micro_batch`, and `running` is only a lower bound (exact when
  every request shares one micro-batch, the serialized case).
- vLLM (default port 8000): `vllm:num_requests_running` and
  `vllm:num_requests_waiting`, one series per engine (DP rank): **summed**.
  None with `--disable-log-stats` or `--headless` (no URL then).
- TensorRT-LLM (`trtllm-serve`, default port 8000): `/metrics` is JSON, a list
  of iteration stats since the last read (`numActiveRequests`,
  `numQueuedRequests`; empty unless `enable_iter_perf_stats` is set in the
  `--extra_llm_api_options` file): the newest entry is the load.

Reading never raises into the caller: `EngineMetricsReader.read()` returns a
`LoadReading` with either a sample or the reason there is none, and counts
failures by kind. `EngineLoadPoller` runs reads on its own thread so sampling
never waits on the network.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from bubblewatch import engines
from bubblewatch.engines.base import Engine
from bubblewatch.model.samples import LoadSample
from bubblewatch.sources._exposition import samples_named
from bubblewatch.sources._http import AnswerError, classify, fetch
from bubblewatch.topology.redact import redact_text

__all__ = [
    "EngineLoadPoller",
    "EngineMetricsReader",
    "LoadFigures",
    "LoadReading",
    "MetricsParseError",
    "parse_load_figures",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 0.5
DEFAULT_MAX_BYTES = 8 << 20


class MetricsParseError(AnswerError):
    """The endpoint answered with something that holds no load metrics."""


class LoadFigures(NamedTuple):
    """Running and queued requests; `micro_batch` when the gauge counts one micro-batch."""

    running: float | None
    queued: float | None
    micro_batch: float | None = None


class LoadReading(NamedTuple):
    """One attempt to read the engine's load: a sample, or the reason there is none."""

    sample: LoadSample | None
    reason: str | None


def parse_load_figures(text: str) -> LoadFigures:
    """The load in a metrics answer: Prometheus text (SGLang, vLLM) or JSON (TensorRT-LLM)."""
    known = [e for e in engines.all_engines() if e.metrics.running is not None]
    if text.lstrip().startswith(("[", "{")):
        return _json_stats(text, [e for e in known if e.metrics.format == "json"])
    prom = [e for e in known if e.metrics.format == "prometheus"]
    wanted = {n for e in prom for n in (e.metrics.running, e.metrics.queued) if n}
    try:
        running = samples_named(text, wanted)  # parses only the lines of these families
    except (ValueError, TypeError, IndexError, OverflowError) as e:
        raise MetricsParseError(f"not Prometheus text format: {e}") from e
    engine = next(
        (e for e in prom if e.metrics.running in running or e.metrics.queued in running), None
    )
    if engine is None:
        prefixes = "/".join(f"{e.name}:" for e in prom)
        raise MetricsParseError(f"no {prefixes} running or queued request metrics in the response")
    m = engine.metrics
    run_series = running.get(m.running or "", [])
    try:
        total = _combine(run_series, engine)
        queued = _combine(running.get(m.queued or "", []), engine)
    except OverflowError:  # an integer of hundreds of digits
        raise MetricsParseError("a load value too large for a float") from None
    micro = total if m.per_micro_batch(labels for labels, _ in run_series) else None
    return LoadFigures(total, queued, micro)


def _json_stats(text: str, known: list[Engine]) -> LoadFigures:
    """Iteration stats (TensorRT-LLM): the newest entry's active and queued requests."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise MetricsParseError(f"not JSON: {e.msg}") from e
    stats = data if isinstance(data, list) else [data]
    for engine in known:
        running, queued = engine.metrics.running, engine.metrics.queued
        entries = [s for s in stats if isinstance(s, dict) and running in s]
        if entries:
            last = entries[-1]
            return LoadFigures(_json_num(last.get(running)), _json_num(last.get(queued)))
    raise MetricsParseError(
        "no iteration stats (TensorRT-LLM serves them with enable_iter_perf_stats, "
        "and only for iterations since the last read)"
    )


def _json_num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def _combine(series: Iterable[tuple[dict[str, str], float]], engine: Engine) -> float | None:
    """One replica's ranks count once (their maximum); replicas are summed."""
    ranks = engine.metrics.rank_labels
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, value in series:
        if not math.isfinite(value):
            continue
        if ranks:
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in ranks))
            groups[key] = max(groups.get(key, value), value)
        else:
            key = tuple(sorted(labels.items()))
            groups[key] = value
    return float(sum(groups.values())) if groups else None


class EngineMetricsReader:
    """Reads one engine's load with a short timeout; never raises, counts failures."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"metrics URL must be http(s), got {redact_text(url)!r}")
        self.url = url
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: Counter[str] = Counter()
        self._reads = 0
        self._last_reason: str | None = None

    @property
    def failures(self) -> dict[str, int]:
        """Failures so far by kind: timeout, connection, http, parse, too-large, error."""
        with self._lock:
            return dict(self._failures)

    @property
    def reads(self) -> int:
        with self._lock:
            return self._reads

    def read(self) -> LoadReading:
        t_s = self._clock()
        try:
            text = self._fetch()
            figures = parse_load_figures(text)
        except Exception as e:  # never raise into the sampling loop
            kind, reason = classify(e)
            self._record(kind, reason)
            return LoadReading(None, reason)
        self._record(None, None)
        sample = LoadSample(t_s, figures.running, figures.queued, figures.micro_batch)
        return LoadReading(sample, None)

    def _fetch(self) -> str:
        req = urllib.request.Request(self.url, headers={"Accept": "text/plain, application/json"})
        return fetch(req, timeout_s=self.timeout_s, max_bytes=self.max_bytes)

    def _record(self, kind: str | None, reason: str | None) -> None:
        with self._lock:
            self._reads += 1
            previous = self._last_reason
            self._last_reason = reason
            if kind is not None:
                self._failures[kind] += 1
        where = redact_text(self.url)
        if reason is not None and reason != previous:
            log.warning("engine metrics at %s: %s", where, reason)
        elif reason is None and previous is not None:
            log.info("engine metrics at %s: reading again", where)


class EngineLoadPoller:
    """Polls an EngineMetricsReader on a daemon thread against monotonic deadlines.

    `latest()` returns the newest sample without waiting; `on_sample` (if given)
    is called on the poller thread for each sample.
    """

    def __init__(
        self,
        reader: EngineMetricsReader,
        *,
        interval_s: float = 1.0,
        on_sample: Callable[[LoadSample], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.reader = reader
        self.interval_s = interval_s
        self._on_sample = on_sample
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latest: LoadSample | None = None
        self._last_reason: str | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> EngineLoadPoller:
        if self._thread is not None:
            raise RuntimeError("poller already started")
        self._thread = threading.Thread(
            target=self._run, name="bubblewatch-engine-metrics", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Ask the thread to end and wait for it (at most one read's timeout, by default)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.reader.timeout_s + 1.0 if timeout_s is None else timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def latest(self) -> LoadSample | None:
        with self._lock:
            return self._latest

    @property
    def last_reason(self) -> str | None:
        """Why the last read gave no sample (None after a good read)."""
        with self._lock:
            return self._last_reason

    def __enter__(self) -> EngineLoadPoller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        next_s = time.monotonic()
        callback_failed = False
        while not self._stop.is_set():
            reading = self.reader.read()
            with self._lock:
                self._last_reason = reading.reason
                if reading.sample is not None:
                    self._latest = reading.sample
            if reading.sample is not None and self._on_sample is not None:
                try:
                    self._on_sample(reading.sample)
                except Exception:
                    if not callback_failed:
                        log.exception("engine load callback failed (said once)")
                        callback_failed = True
            next_s += self.interval_s
            now = time.monotonic()
            if next_s < now:  # fell behind (slow endpoint): skip, do not burst
                next_s = now + self.interval_s
            self._stop.wait(next_s - now)
