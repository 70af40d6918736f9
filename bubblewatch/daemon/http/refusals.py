"""What the HTTP endpoint refused, counted by reason and exported on its own /metrics.

The endpoint's bounds (docs/daemon.md, "HTTP endpoint" and "Limits") shed
load on purpose: a fast 503 past `web.max_requests`, a connection closed at
the connection cap or when file descriptors run out, a client cut off at a
deadline, a malformed or oversized request head. Each is counted here so an
operator sees from Prometheus, not only from rate-limited log lines, that
scrapes were turned away and why.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from enum import Enum

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

REJECTED_METRIC = "bubblewatch_http_requests_rejected_total"
REJECTED_HELP = (
    "Requests and connections the HTTP endpoint turned away, by reason: max_requests "
    "(fast 503), connections (closed at the connection cap), file_descriptors (closed "
    "when out of descriptors), deadline (head, TLS handshake or response not done in "
    "time), bad_request (malformed or oversized request head)."
)


class Refusal(Enum):
    MAX_REQUESTS = "max_requests"
    CONNECTIONS = "connections"
    FILE_DESCRIPTORS = "file_descriptors"
    DEADLINE = "deadline"
    BAD_REQUEST = "bad_request"


class RefusalCounts:
    """Counts by reason; written by the connection loop, read by a scrape (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = dict.fromkeys(Refusal, 0)

    def add(self, reason: Refusal) -> int:
        """Count one refusal; returns the new total for `reason`."""
        with self._lock:
            self._n[reason] += 1
            return self._n[reason]

    def snapshot(self) -> Mapping[Refusal, int]:
        with self._lock:
            return dict(self._n)


class RefusalCollector(Collector):
    """Exports `counts` as one counter family; every reason from 0, so rates work at once."""

    def __init__(self, counts: RefusalCounts) -> None:
        self._counts = counts

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(REJECTED_METRIC, REJECTED_HELP, labels=("reason",))]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(REJECTED_METRIC, REJECTED_HELP, labels=("reason",))
        for reason, n in self._counts.snapshot().items():
            family.add_metric([reason.value], float(n))
        yield family
