"""Shared pieces of the hostile alert-delivery tests: alerts, a fast policy, waiting, metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import generate_latest

from bubblewatch.sinks.alerts import Alert, AlertDispatcher, RetryPolicy
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sinks.snapshot import ExporterSnapshot

FAST = RetryPolicy(timeout_s=1.0, initial_backoff_s=0.02, max_backoff_s=0.1)


def alert(i: int) -> Alert:
    return Alert(labels={"alertname": f"Rule{i}", "pipeline": "p"}, starts_at_s=1000.0 + i)


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def metrics_text(disp: AlertDispatcher) -> str:
    """The exporter's text for `disp`'s receivers, as a scrape would see it."""
    registry = make_registry(
        lambda: ExporterSnapshot(receivers=tuple(disp.stats()), alert_state_saved=disp.state_saved)
    )
    return generate_latest(registry).decode()
