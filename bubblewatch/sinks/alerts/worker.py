"""One thread per receiver that drains its persistent queue, in order, with retries.

The producer only appends to the queue (a local SQLite write) and wakes the
worker, so a slow or dead receiver never stalls sampling or analysis.

A spool that refuses writes (a full disk) loses nothing while the process
lives: the alert is held in memory (bounded by the queue's size, oldest
dropped and counted), every failed write is counted, the worker keeps trying
to move held alerts to disk and, meanwhile, delivers them from memory after
what the disk already holds. An item delivered whose removal from the disk
fails is remembered and not sent again.

Nothing a receiver answers ends the thread: every failure is an outcome,
counted by reason and retried with backoff. Should the thread end anyway
(a bug), `ensure_alive` starts it again, counted in `worker_restarts_total`.

`close` aborts the attempt in flight (`http_client.Abort`: its socket is
shut down from the closing thread, so a receiver that accepts and never
answers, or a host that never completes the handshake, holds the stop for
milliseconds, not until the attempt's deadline); the abandoned alert stays
queued for the next start, with no outcome counted. A thread that still has
not ended by close's timeout (one waiting on a name lookup, which nothing
can wake) is detached: the spool is closed under the lock that guards it,
and the thread, when the lookup ends, touches neither the spool nor the
counts and ends.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from bubblewatch.http_client import Abort
from bubblewatch.limits import (
    BACKOFF_MIN_S,
    DAY_S,
    INITIAL_BACKOFF_MAX_S,
    RECEIVER_MAX_TIMEOUT_S,
    RECEIVER_MIN_TIMEOUT_S,
)
from bubblewatch.sinks.alerts.model import Alert
from bubblewatch.sinks.alerts.queue import PersistentQueue, QueueError, QueueItem
from bubblewatch.sinks.alerts.receivers import Receiver
from bubblewatch.sinks.alerts.transport import REASONS, DeliveryError, Transport

log = logging.getLogger("bubblewatch.alerts")

OUTCOMES = ("success", "error", "timeout", "rejected")
# How often a worker tries again a spool that refused a write (capped by max_backoff).
SPOOL_RETRY_S = 5.0


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: attempt n waits initial * 2**n, capped, times U(0.5, 1)."""

    timeout_s: float = 10.0
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 300.0

    def __post_init__(self) -> None:
        # Bounded: a wait of 200000 days overflows the platform's time_t in Event.wait.
        for name, value, low, high in (
            ("timeout_s", self.timeout_s, RECEIVER_MIN_TIMEOUT_S, RECEIVER_MAX_TIMEOUT_S),
            ("initial_backoff_s", self.initial_backoff_s, BACKOFF_MIN_S, INITIAL_BACKOFF_MAX_S),
            ("max_backoff_s", self.max_backoff_s, BACKOFF_MIN_S, DAY_S),
        ):
            if not low <= value <= high:
                raise ValueError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
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
    spool_errors_total: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # failed attempts by reason
    worker_restarts_total: int = 0
    held_in_memory: int = 0  # refused by the spool: lost if the process is killed now


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
        self._failures: Counter[str] = Counter({r: 0 for r in REASONS})
        self._counts_lock = threading.Lock()
        # Alerts the spool refused, oldest first; the lock also serialises writes to the spool.
        self._held: deque[Alert] = deque()
        self._held_lock = threading.RLock()
        self._held_dropped = 0
        self._spool_errors = 0
        # Disk items delivered (or rejected) whose removal failed: id -> "ack" or "drop".
        self._done: dict[int, Literal["ack", "drop"]] = {}
        self._tries: tuple[object, int] = (None, 0)  # (head, failed tries of it in this run)
        self._last_disk = (0, 0)  # (length, dropped) last read, shown while the disk fails
        self._restarts = 0
        self._closed = False  # set by close under _held_lock: the spool is no longer ours
        self._abort = Abort()  # stop() ends the attempt in flight with it
        self._thread_lock = threading.Lock()
        self._thread = self._new_thread()

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(
            target=self._thread_main, name=f"bubblewatch-deliver-{self.receiver.name}", daemon=True
        )

    def start(self) -> None:
        try:
            len(self.queue)  # opens the spool now, so a failure is said at start
        except QueueError as e:
            self._spool_errors += 1
            self._log_spool_error(e)
        self._thread.start()

    def ensure_alive(self) -> bool:
        """Start the delivery thread again if it ended without `close`; True if it did."""
        with self._thread_lock:
            if self._stop.is_set() or self._thread.ident is None or self._thread.is_alive():
                return False
            self._restarts += 1
            log.error(
                "alert delivery thread had ended; started again",
                extra={"kv": {"receiver": self.receiver.name, "restarts": self._restarts}},
            )
            self._thread = self._new_thread()
            self._thread.start()
            return True

    def enqueue(self, alert: Alert) -> bool:
        """Persist `alert` for delivery; returns at once. False: held in memory (spool failed)."""
        with self._held_lock:
            self._held.append(alert)
            if len(self._held) > self.queue.max_items:
                self._held.popleft()
                self._held_dropped += 1
                self._log_queue_full(1)
            ok = self._spool()
        self.ensure_alive()
        self._wake.set()
        return ok

    def stats(self) -> ReceiverStats:
        with self._counts_lock:
            counts = dict(self._counts)
            failures = dict(self._failures)
        # One lock over the disk and what memory holds: an item is never seen both rejected in
        # memory and dropped on disk (nor neither) while the worker finishes it.
        with self._held_lock:
            with contextlib.suppress(QueueError):  # failing: show what it held when last read
                self._last_disk = (len(self.queue), self.queue.dropped_total)
            length, dropped = self._last_disk
            length += len(self._held) - len(self._done)
            dropped += self._held_dropped + sum(how == "drop" for how in self._done.values())
            errors = self._spool_errors
            held = len(self._held)
        return ReceiverStats(
            self.receiver.name, counts, max(0, length), dropped, errors, failures, self._restarts,
            held,
        )  # fmt: skip

    def stop(self) -> None:
        """Abort the attempt in flight and stop delivering, without waiting; `close` waits."""
        self._stop.set()
        self._abort.abort()
        self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Abort the attempt in flight and stop (within `timeout_s`); pending items stay on disk."""
        self.stop()
        with self._thread_lock:
            thread = self._thread
        if thread.is_alive():
            thread.join(timeout_s)
        with self._held_lock:
            self._spool()  # a last try, so a spool that recovered keeps them for the next start
            if self._held:
                log.error(
                    "alerts not written to disk are lost at exit",
                    extra={"kv": {"receiver": self.receiver.name, "alerts": len(self._held)}},
                )
            # Under the lock: a thread still in its attempt (a receiver that never answers)
            # sees this before it would touch the spool, and ends without a word.
            self._closed = True
            self.queue.close()

    def _count(self, outcome: str, reason: str | None = None) -> None:
        with self._counts_lock:
            self._counts[outcome] += 1
            if reason is not None:
                self._failures[reason] += 1

    def _spool(self) -> bool:
        """Move held alerts to the disk queue, oldest first; False when the spool refused one."""
        with self._held_lock:
            while self._held:
                try:
                    dropped = self.queue.put(self._held[0].to_dict(), self._clock())
                except QueueError as e:
                    self._spool_errors += 1
                    self._log_spool_error(e)
                    return False
                self._held.popleft()
                if dropped:
                    self._log_queue_full(dropped)
        return True

    def _thread_main(self) -> None:
        try:
            self._run()
        except BaseException:  # ends the thread; ensure_alive starts another
            log.exception(
                "alert delivery thread failed", extra={"kv": {"receiver": self.receiver.name}}
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay_s = self._step()
            except QueueError as e:
                self._log_spool_error(e)
                delay_s = self._spool_retry_s
            except Exception:  # a bug: said, and tried again later, never the end of delivery
                log.exception(
                    "alert delivery step failed; tried again",
                    extra={
                        "kv": {"receiver": self.receiver.name},
                        "ratelimit_key": f"deliver-step:{self.receiver.name}",
                    },
                )
                delay_s = self._spool_retry_s
            if delay_s is None:
                self._wake.wait()
                self._wake.clear()
            elif delay_s > 0:
                self._stop.wait(delay_s)

    @property
    def _spool_retry_s(self) -> float:
        return min(SPOOL_RETRY_S, self._policy.max_backoff_s)

    def _step(self) -> float | None:
        """Try the head once. Returns None when idle, else seconds to wait before the next try."""
        spooled = self._spool()
        self._finish_done()
        try:
            item = self.queue.head(skip=frozenset(self._done))
        except QueueError as e:
            self._log_spool_error(e)
            item = None  # the disk cannot be read: deliver what memory holds meanwhile
        if item is not None:
            return self._try_disk(item)
        with self._held_lock:
            held = self._held[0] if self._held else None
        if held is not None:
            return self._try_held(held)
        return None if spooled and not self._done else self._spool_retry_s

    def _try_disk(self, item: QueueItem) -> float:
        tries = max(item.attempts, self._tries_of(("disk", item.id)))
        try:
            alert = Alert.from_dict(item.payload)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            outcome: Literal["sent", "retry", "rejected", "abandoned"] = "rejected"  # unreadable
            self._count("rejected", "internal")
            log.error(
                "dropped an alert the queue cannot decode",
                extra={"kv": {"receiver": self.receiver.name, "error": type(e).__name__}},
            )
        else:
            outcome = self._send(alert, tries)
        if outcome == "abandoned":  # stopped: the item stays in the spool, as it was
            return 0.0
        with self._held_lock:
            if self._closed:  # detached by close: the item stays in the spool, as it was
                return 0.0
            if outcome == "retry":
                self._tries = (("disk", item.id), tries + 1)
                try:
                    self.queue.record_attempt(item.id)
                except QueueError as e:
                    self._log_spool_error(e)
                return self._policy.backoff_s(tries, self._rng)
            self._done[item.id] = "ack" if outcome == "sent" else "drop"
            self._finish_done()
        return 0.0

    def _try_held(self, alert: Alert) -> float:
        tries = self._tries_of(alert)
        outcome = self._send(alert, tries)
        if outcome == "abandoned":  # stopped: held still, written to the spool by close
            return 0.0
        if outcome == "retry":
            self._tries = (alert, tries + 1)
            return self._policy.backoff_s(tries, self._rng)
        with self._held_lock:
            if self._held and self._held[0] is alert:
                self._held.popleft()
                if outcome == "rejected":
                    self._held_dropped += 1
        return 0.0

    def _tries_of(self, head: object) -> int:
        key, n = self._tries
        return n if key == head else 0

    def _send(self, alert: Alert, tries: int) -> Literal["sent", "retry", "rejected", "abandoned"]:
        try:
            request = self.receiver.build_request([alert], self._clock())
            self._transport.send(request, self._policy.timeout_s, abort=self._abort)
        except Exception as e:  # every failure is an outcome, counted and retried
            if self._abort.aborted or self._closed:  # stopped mid-attempt: no outcome, no word
                return "abandoned"
            err = e if isinstance(e, DeliveryError) else DeliveryError("error", type(e).__name__)
            self._count(err.outcome, err.reason)
            self._log_failure(err, tries)
            return "retry" if err.retryable else "rejected"
        if self._closed:  # answered after close gave up on it: delivered again at the next start
            return "abandoned"
        self._count("success")
        return "sent"

    def _finish_done(self) -> None:
        """Remove from the disk the items already delivered or rejected (a full disk may refuse)."""
        with self._held_lock:
            for item_id, how in list(self._done.items()):
                try:
                    if how == "ack":
                        self.queue.ack(item_id)
                    else:
                        self.queue.drop(item_id)
                except QueueError as e:
                    self._log_spool_error(e)
                    return
                del self._done[item_id]

    def _log_queue_full(self, dropped: int) -> None:
        log.warning(
            "alert queue full, dropped oldest",
            extra={
                "kv": {"receiver": self.receiver.name, "dropped": dropped},
                "ratelimit_key": f"queue-full:{self.receiver.name}",
            },
        )

    def _log_spool_error(self, e: QueueError) -> None:
        log.error(
            "alert queue failed; alerts are held in memory and the disk is tried again",
            extra={
                "kv": {"receiver": self.receiver.name, "error": str(e)},
                "ratelimit_key": f"queue-error:{self.receiver.name}",
            },
        )

    def _log_failure(self, e: DeliveryError, attempts: int) -> None:
        log.warning(
            "alert delivery failed",
            extra={
                "kv": {
                    "receiver": self.receiver.name,
                    "outcome": e.outcome,
                    "reason": e.reason,
                    "error": redact(str(e), self.receiver.secrets()),
                    "attempt": attempts + 1,
                },
                "ratelimit_key": f"deliver:{self.receiver.name}:{e.reason}:{e.status}",
            },
        )
