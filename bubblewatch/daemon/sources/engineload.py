"""Each discovered engine's load (running and queued requests), polled off the sampling path.

One `EngineLoadPoller` thread per pipeline with a metrics endpoint; each read
has a short timeout, and what it returns lands in that pipeline's bounded
buffer. The analysis takes a window of it (`series`), the exporter the newest
reading (`latest`, None once it is stale). A dead or slow endpoint only means
the load is unknown: nothing here ever waits on the network for the caller.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.model.recording import LoadSeries
from bubblewatch.model.samples import LoadSample
from bubblewatch.sources.engine_metrics import EngineLoadPoller, EngineMetricsReader
from bubblewatch.topology.redact import redact_text

log = logging.getLogger("bubblewatch.engine")

OnSample = Callable[[str, LoadSample], None]


@dataclass
class _Feed:
    url: str
    poller: EngineLoadPoller
    buffer: deque[LoadSample]


class EngineLoads:
    """Pollers for the pipelines' engine metrics endpoints, started and stopped with discovery."""

    def __init__(
        self,
        *,
        capacity: int,
        interval_s: float = 1.0,
        timeout_s: float = 0.5,
        stale_after_s: float | None = None,
        on_sample: OnSample | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"engine load capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        # A reading older than a few polls says nothing about now.
        self.stale_after_s = (
            stale_after_s if stale_after_s is not None else max(5.0, 3 * interval_s + timeout_s)
        )
        self._on_sample = on_sample
        self._lock = threading.Lock()
        self._feeds: dict[str, _Feed] = {}

    def update(self, pipelines: Sequence[Pipeline]) -> None:
        """Poll exactly the endpoints of `pipelines` (a changed URL restarts its poller)."""
        wanted = {p.id: p.metrics_url for p in pipelines if p.metrics_url}
        with self._lock:
            stale = [(pid, f) for pid, f in self._feeds.items() if wanted.get(pid) != f.url]
            for pid, _ in stale:
                del self._feeds[pid]
            new = [(pid, url) for pid, url in wanted.items() if pid not in self._feeds]
            for pid, url in new:
                self._feeds[pid] = self._feed(pid, url)
            started = [(pid, self._feeds[pid]) for pid, _ in new]
        for pid, f in stale:
            f.poller.stop(timeout_s=0.0)  # a daemon thread: it ends after its current read
            log.info("engine metrics no longer polled", extra={"kv": {"pipeline": pid}})
        for pid, f in started:
            f.poller.start()
            log.info(
                "polling engine metrics",
                extra={"kv": {"pipeline": pid, "url": redact_text(f.url)}},
            )

    def _feed(self, pid: str, url: str) -> _Feed:
        buffer: deque[LoadSample] = deque(maxlen=self.capacity)
        lock = self._lock
        on_sample = self._on_sample

        def add(sample: LoadSample) -> None:  # runs on the poller thread
            with lock:
                buffer.append(sample)
            if on_sample is not None:
                on_sample(pid, sample)

        reader = EngineMetricsReader(url, timeout_s=self.timeout_s)
        return _Feed(
            url, EngineLoadPoller(reader, interval_s=self.interval_s, on_sample=add), buffer
        )

    def polled(self) -> tuple[str, ...]:
        """Ids of the pipelines whose engine load is being polled."""
        with self._lock:
            return tuple(sorted(self._feeds))

    def series(self, pipeline_id: str, start_s: float, end_s: float) -> LoadSeries | None:
        """Load readings with start_s <= t < end_s, or None when this pipeline is not polled."""
        with self._lock:
            feed = self._feeds.get(pipeline_id)
            if feed is None:
                return None
            rows = [s for s in feed.buffer if start_s <= s.t_s < end_s]
        return LoadSeries.from_samples(rows)

    def latest(self, pipeline_id: str, now_s: float) -> LoadSample | None:
        """The newest reading, or None when there is none or it is stale (endpoint down)."""
        with self._lock:
            feed = self._feeds.get(pipeline_id)
            last = feed.buffer[-1] if feed is not None and feed.buffer else None
        if last is None or now_s - last.t_s > self.stale_after_s:
            return None
        return last

    def failures(self) -> dict[str, dict[str, int]]:
        """{pipeline: {failure kind: count}} since each poller started."""
        with self._lock:
            feeds = dict(self._feeds)
        return {pid: f.poller.reader.failures for pid, f in sorted(feeds.items())}

    def close(self) -> None:
        with self._lock:
            feeds, self._feeds = list(self._feeds.values()), {}
        for f in feeds:
            f.poller.stop(timeout_s=0.0)
