"""One thread per receiver that drains its persistent queue, in order, with retries.

The producer only appends to the queue (a local SQLite write) and wakes the
worker, so a slow or dead receiver never stalls sampling or analysis.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from bubblewatch.sinks.alerts.model import Alert
from bubblewatch.sinks.alerts.queue import PersistentQueue, QueueError
from bubblewatch.sinks.alerts.receivers import Receiver
from bubblewatch.sinks.alerts.transport import DeliveryError, Transport

log = logging.getLogger("bubblewatch.alerts")

OUTCOMES = ("success", "error", "timeout", "rejected")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: attempt n waits initial * 2**n, capped, times U(0.5, 1)."""

    timeout_s: float = 10.0
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 300.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.initial_backoff_s <= 0:
            raise ValueError("timeout_s and initial_backoff_s must be > 0")
        if self.max_backoff_s < self.initial_backoff_s:
            raise ValueError("max_backoff_s must be >= initial_backoff_s")

    def backoff_s(self, attempt: int, rng: random.Random) -> float:
        base = min(self.max_backoff_s, self.initial_backoff_s * 2.0 ** min(attempt, 62))
        return base * rng.uniform(0.5, 1.0)


@dataclass(frozen=True)
class ReceiverStats:
    """What the exporter shows about one receiver (never its URL)."""

    receiver: str
    deliveries: dict[str, int]
    queue_length: int
    dropped_total: int


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "<redacted>")
    return text


class DeliveryWorker:
    """Delivers `receiver`'s queue head until it succeeds (or is rejected), then the next."""

    def __init__(
        self,
        receiver: Receiver,
        queue: PersistentQueue,
        transport: Transport,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.receiver = receiver
        self.queue = queue
        self._transport = transport
        self._policy = policy
        self._clock = clock
        self._rng = rng or random.Random()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._counts: Counter[str] = Counter({o: 0 for o in OUTCOMES})
        self._counts_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"bubblewatch-deliver-{receiver.name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def enqueue(self, alert: Alert) -> None:
        """Persist `alert` for delivery; returns at once."""
        dropped = self.queue.put(alert.to_dict(), self._clock())
        if dropped:
            log.warning(
                "alert queue full, dropped oldest",
                extra={
                    "kv": {"receiver": self.receiver.name, "dropped": dropped},
                    "ratelimit_key": f"queue-full:{self.receiver.name}",
                },
            )
        self._wake.set()

    def stats(self) -> ReceiverStats:
        with self._counts_lock:
            counts = dict(self._counts)
        return ReceiverStats(self.receiver.name, counts, len(self.queue), self.queue.dropped_total)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the request in flight (bounded by its timeout); pending items stay on disk."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self.queue.close()

    def _count(self, outcome: str) -> None:
        with self._counts_lock:
            self._counts[outcome] += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay_s = self._step()
            except QueueError as e:
                log.error(
                    "alert queue failed",
                    extra={
                        "kv": {"receiver": self.receiver.name, "error": str(e)},
                        "ratelimit_key": f"queue-error:{self.receiver.name}",
                    },
                )
                delay_s = self._policy.max_backoff_s
            if delay_s is None:
                self._wake.wait()
                self._wake.clear()
            elif delay_s > 0:
                self._stop.wait(delay_s)

    def _step(self) -> float | None:
        """Try the head once. Returns None when idle, else seconds to wait before the next try."""
        item = self.queue.head()
        if item is None:
            return None
        alert = Alert.from_dict(item.payload)
        request = self.receiver.build_request([alert], self._clock())
        try:
            self._transport.send(request, self._policy.timeout_s)
        except DeliveryError as e:
            self._count(e.outcome)
            self._log_failure(e, item.attempts)
            if not e.retryable:
                self.queue.drop(item.id)
                return 0.0
            self.queue.record_attempt(item.id)
            return self._policy.backoff_s(item.attempts, self._rng)
        self.queue.ack(item.id)
        self._count("success")
        return 0.0

    def _log_failure(self, e: DeliveryError, attempts: int) -> None:
        log.warning(
            "alert delivery failed",
            extra={
                "kv": {
                    "receiver": self.receiver.name,
                    "outcome": e.outcome,
                    "error": redact(str(e), self.receiver.secrets()),
                    "attempt": attempts + 1,
                },
                "ratelimit_key": f"deliver:{self.receiver.name}:{e.outcome}:{e.status}",
            },
        )
