"""Joins the tracker and one delivery worker per receiver: the alert sink's front door."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bubblewatch.sinks.alerts.model import Alert
from bubblewatch.sinks.alerts.queue import PersistentQueue
from bubblewatch.sinks.alerts.receivers import (
    AlertmanagerReceiver,
    Receiver,
    SlackReceiver,
    WebhookReceiver,
)
from bubblewatch.sinks.alerts.state import FILENAME as STATE_FILENAME
from bubblewatch.sinks.alerts.state import AlertStateStore
from bubblewatch.sinks.alerts.tracker import AlertTracker
from bubblewatch.sinks.alerts.transport import Transport, UrllibTransport
from bubblewatch.sinks.alerts.worker import DeliveryWorker, ReceiverStats, RetryPolicy

RECEIVER_TYPES = ("webhook", "slack", "alertmanager")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class ReceiverConfig:
    """One configured receiver. `name` shows in logs and metrics; `url` and `secret` never do."""

    name: str
    type: str
    url: str = field(repr=False)
    secret: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_queue: int = 1000
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(
                f"receiver name {self.name!r} must be 1-64 of letters, digits, '_', '.', '-'"
            )
        if self.type not in RECEIVER_TYPES:
            raise ValueError(f"receiver type must be one of {RECEIVER_TYPES}, got {self.type!r}")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("receiver url must start with http:// or https://")
        if self.max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {self.max_queue}")


def build_receiver(cfg: ReceiverConfig, *, firing_validity_s: float = 3600.0) -> Receiver:
    if cfg.type == "webhook":
        return WebhookReceiver(cfg.name, cfg.url, cfg.secret, cfg.headers)
    if cfg.type == "slack":
        return SlackReceiver(cfg.name, cfg.url)
    return AlertmanagerReceiver(
        cfg.name, cfg.url, headers=cfg.headers, firing_validity_s=firing_validity_s
    )


class AlertDispatcher:
    """`notify(firing, now)` dedupes, repeats and resolves, then queues to every receiver.

    Queues live in `state_dir/alerts-<receiver>.sqlite3`; a new dispatcher on
    the same directory delivers what an earlier one left pending. With at
    least one receiver, the firing state lives in `state_dir/alerts-state.sqlite3`
    and a new dispatcher takes it back (`restored`): alerts still firing keep
    their `starts_at`, and those that stopped are resolved by the first
    `notify(..., settled=True)`.
    """

    def __init__(
        self,
        receivers: Iterable[ReceiverConfig],
        state_dir: Path,
        *,
        repeat_interval_s: float = 3600.0,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tracker = AlertTracker(repeat_interval_s)
        self._workers: list[DeliveryWorker] = []
        self._store: AlertStateStore | None = None
        self.restored = 0
        transport = transport or UrllibTransport()
        configs = list(receivers)
        names = [c.name for c in configs]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"two receivers are named {name!r}")
        for cfg in configs:
            queue = PersistentQueue(state_dir / f"alerts-{cfg.name}.sqlite3", cfg.max_queue)
            receiver = build_receiver(cfg, firing_validity_s=4 * repeat_interval_s)
            self._workers.append(DeliveryWorker(receiver, queue, transport, cfg.retry, clock=clock))
        if configs:  # without receivers nothing is sent, so there is no state to keep
            self._store = AlertStateStore(state_dir / STATE_FILENAME)
            self.restored = self._tracker.restore(self._store.load())
        for w in self._workers:
            w.start()

    @property
    def active(self) -> list[Alert]:
        return self._tracker.active

    def notify(self, firing: Iterable[Alert], now_s: float, *, settled: bool = True) -> list[Alert]:
        """Feed every alert firing now; returns what was queued (new, repeated, resolved).

        `settled` False (the first analysis window after a start is not full
        yet) keeps restored alerts that do not fire from being resolved.
        """
        out = self._tracker.update(firing, now_s, settled=settled)
        for alert in out:
            for w in self._workers:
                w.enqueue(alert)
        if out and self._store is not None:
            # After queueing: a kill in between re-sends (at least once), never loses.
            self._store.save(self._tracker.snapshot())
        return out

    def stats(self) -> list[ReceiverStats]:
        return [w.stats() for w in self._workers]

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the workers; what is still queued stays on disk for the next start."""
        deadline = time.monotonic() + timeout_s
        for w in self._workers:
            w.close(max(0.1, deadline - time.monotonic()))
        if self._store is not None:
            self._store.close()
