"""Joins the tracker and one delivery worker per receiver: the alert sink's front door."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bubblewatch.sinks.alerts.model import Alert
from bubblewatch.sinks.alerts.queue import PersistentQueue, QueueError
from bubblewatch.sinks.alerts.receivers import (
    AlertmanagerReceiver,
    Receiver,
    SlackReceiver,
    WebhookReceiver,
)
from bubblewatch.sinks.alerts.state import FILENAME as STATE_FILENAME
from bubblewatch.sinks.alerts.state import AlertStateStore
from bubblewatch.sinks.alerts.supervisor import WorkerSupervisor
from bubblewatch.sinks.alerts.target import (
    ReceiverFieldError,
    check_headers,
    check_url,
    split_credentials,
)
from bubblewatch.sinks.alerts.tracker import AlertTracker
from bubblewatch.sinks.alerts.transport import HttpTransport, Transport
from bubblewatch.sinks.alerts.worker import DeliveryWorker, ReceiverStats, RetryPolicy

log = logging.getLogger("bubblewatch.alerts")

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
        """ReceiverFieldError (a ValueError naming the field) for a receiver that cannot work."""
        if not _NAME_RE.match(self.name):
            raise ReceiverFieldError(
                "name",
                f"receiver name {self.name!r} must be 1-64 of letters, digits, '_', '.', '-'",
            )
        if self.type not in RECEIVER_TYPES:
            raise ReceiverFieldError(
                "type", f"receiver type must be one of {RECEIVER_TYPES}, got {self.type!r}"
            )
        check_url(self.url, credentials_allowed=self.type != "slack")
        check_headers(self.headers)
        if split_credentials(self.url)[1] and any(
            k.lower() == "authorization" for k in self.headers
        ):
            raise ReceiverFieldError(
                "url", "give credentials either as user:password@ in the url or as an "
                "Authorization header, not both"
            )  # fmt: skip
        if self.max_queue < 1:
            raise ReceiverFieldError("max_queue", f"max_queue must be >= 1, got {self.max_queue}")


def build_receiver(cfg: ReceiverConfig, *, firing_validity_s: float = 3600.0) -> Receiver:
    url, auth = split_credentials(cfg.url)  # user:password@ -> Authorization: Basic
    headers = {**cfg.headers, **({"Authorization": auth} if auth else {})}
    if cfg.type == "webhook":
        return WebhookReceiver(cfg.name, url, cfg.secret, headers)
    if cfg.type == "slack":
        return SlackReceiver(cfg.name, url)
    return AlertmanagerReceiver(cfg.name, url, headers=headers, firing_validity_s=firing_validity_s)


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
        transport = transport or HttpTransport()
        configs = list(receivers)
        names = [c.name for c in configs]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"two receivers are named {name!r}")
        self._state_dirty = False
        for cfg in configs:
            # Lazy: a spool that cannot be opened now (a full disk) is tried again later.
            queue = PersistentQueue(
                state_dir / f"alerts-{cfg.name}.sqlite3", cfg.max_queue, lazy=True
            )
            receiver = build_receiver(cfg, firing_validity_s=4 * repeat_interval_s)
            self._workers.append(DeliveryWorker(receiver, queue, transport, cfg.retry, clock=clock))
        if configs:  # without receivers nothing is sent, so there is no state to keep
            self._store = AlertStateStore(state_dir / STATE_FILENAME, lazy=True)
            try:
                self.restored = self._tracker.restore(self._store.load())
            except QueueError as e:
                log.error(
                    "cannot read the saved alert state; alerts firing before the restart "
                    "are not restored",
                    extra={"kv": {"error": str(e)}},
                )
        for w in self._workers:
            w.start()
        self._supervisor = WorkerSupervisor(self._workers)
        self._supervisor.start()

    @property
    def active(self) -> list[Alert]:
        return self._tracker.active

    def notify(self, firing: Iterable[Alert], now_s: float, *, settled: bool = True) -> list[Alert]:
        """Feed every alert firing now; returns what was queued (new, repeated, resolved).

        `settled` False (the first analysis window after a start is not full
        yet) keeps restored alerts that do not fire from being resolved and
        starts no new alert.
        """
        out = self._tracker.update(firing, now_s, settled=settled)
        for alert in out:
            for w in self._workers:  # each on its own: a failing spool holds back no other
                w.enqueue(alert)
        if (out or self._state_dirty) and self._store is not None:
            # After queueing: a kill in between re-sends (at least once), never loses.
            try:
                self._store.save(self._tracker.snapshot())
                self._state_dirty = False
            except QueueError as e:
                self._state_dirty = True  # saved whole at the next notify
                log.error(
                    "cannot save the alert state; tried again at the next analysis",
                    extra={"kv": {"error": str(e)}, "ratelimit_key": "alert-state-save"},
                )
        return out

    @property
    def state_saved(self) -> bool:
        """False while the last save of the firing state failed (a kill now restores older)."""
        return not self._state_dirty

    def stats(self) -> list[ReceiverStats]:
        return [w.stats() for w in self._workers]

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the workers, aborting the requests in flight; what is queued stays on disk."""
        deadline = time.monotonic() + timeout_s
        self._supervisor.close()
        for w in self._workers:  # every receiver's request aborted at once, then each joined
            w.stop()
        for w in self._workers:
            w.close(max(0.1, deadline - time.monotonic()))
        if self._store is not None:
            self._store.close()
