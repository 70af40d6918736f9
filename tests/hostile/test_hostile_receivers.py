"""Receivers that do not speak HTTP, trickle, or misbehave: delivery never stops.

Pins: an answer that is not HTTP (an SSH banner, an over-long line, garbage,
HTTP/0.9, more than 100 headers) raised `http.client.BadStatusLine` (or
`LineTooLong`, `HTTPException`) out of the delivery thread, which died: the
queue never drained and no healthy receiver brought it back. A receiver
trickling one byte every 2 s held each attempt far past `timeout`, and a body
cut short of its Content-Length was counted `success` and the alert removed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from bubblewatch.sinks.alerts import (
    AlertDispatcher,
    DeliveryWorker,
    PersistentQueue,
    ReceiverConfig,
    RetryPolicy,
    build_receiver,
)
from bubblewatch.sinks.alerts.transport import HttpTransport

from ._alerts import FAST, alert, metrics_text, wait_until
from ._http import HEALTHY, raw_peer

HOSTILE = {
    "ssh-banner": (b"SSH-2.0-OpenSSH_9.2\r\n", "protocol"),
    "line-too-long": (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", "protocol"),
    "garbage": (bytes(range(256)) * 4, "protocol"),
    "http-0.9": (b"<html><body>ok</body></html>\n", "protocol"),
    "101-headers": (
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n",
        "protocol",
    ),
    "short-body": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "incomplete"),
    "broken-chunks": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "incomplete"),
    "huge-body": (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * (1 << 20), "too_large"),
    "closed": (b"", "connection"),
}


def alertnames(requests: list[bytes]) -> list[str]:
    out = []
    for raw in requests:
        body = json.loads(raw.partition(b"\r\n\r\n")[2])
        alerts = body if isinstance(body, list) else body["alerts"]  # Alertmanager: a list
        out += [a["labels"]["alertname"] for a in alerts]
    return out


@pytest.mark.parametrize("rtype", ["webhook", "slack", "alertmanager"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_answer_is_a_counted_failure_and_delivery_resumes(
    tmp_path: Path, case: str, rtype: str
) -> None:
    answer, reason = HOSTILE[case]
    with raw_peer(answer) as peer:
        disp = AlertDispatcher(
            [ReceiverConfig("hook", rtype, peer.url, retry=FAST)], tmp_path, repeat_interval_s=3600
        )
        try:
            disp.notify([alert(1), alert(2)], now_s=1.0)
            wait_until(lambda: disp.stats()[0].failures[reason] >= 3)
            stats = disp.stats()[0]
            assert stats.deliveries["success"] == 0
            assert stats.queue_length == 2  # nothing counted delivered, nothing lost
            assert stats.worker_restarts_total == 0  # the thread never died
            with peer.lock:
                peer.answer = HEALTHY  # the receiver is fixed
            wait_until(lambda: disp.stats()[0].queue_length == 0)
            stats = disp.stats()[0]
            text = metrics_text(disp)
        finally:
            disp.close()
    assert stats.deliveries["success"] == 2
    assert stats.dropped_total == 0
    failures = stats.failures[reason]
    assert sum(stats.failures.values()) == failures  # each counted under its own reason
    assert (
        f'bubblewatch_alert_delivery_failures_total{{reason="{reason}",receiver="hook"}} '
        f"{float(failures)}" in text
    )
    if rtype != "slack":  # Slack's text carries the alert, not the labels
        got = alertnames(peer.all_requests())
        assert got[-2:] == ["Rule1", "Rule2"]


def test_a_trickling_receiver_is_cut_at_the_deadline_and_not_counted_delivered(
    tmp_path: Path,
) -> None:
    """One byte every 0.25 s of a 60-byte answer with `timeout: 1s`: each try ends by ~1 s."""
    policy = RetryPolicy(timeout_s=1.0, initial_backoff_s=0.02, max_backoff_s=0.05)
    with raw_peer(HEALTHY, trickle_s=0.25) as peer:
        disp = AlertDispatcher(
            [ReceiverConfig("hook", "webhook", peer.url, retry=policy)],
            tmp_path,
            repeat_interval_s=3600,
        )
        try:
            t0 = time.monotonic()
            disp.notify([alert(1)], now_s=1.0)
            wait_until(lambda: disp.stats()[0].failures["timeout"] >= 2, timeout_s=8.0)
            two_tries_s = time.monotonic() - t0
            stats = disp.stats()[0]
            assert stats.deliveries["success"] == 0 and stats.queue_length == 1
            with peer.lock:
                peer.trickle_s = 0.0
            wait_until(lambda: disp.stats()[0].queue_length == 0)
        finally:
            disp.close()
    assert two_tries_s < 3.5, f"two tries took {two_tries_s:.2f} s with a 1 s deadline"
    assert stats.deliveries["timeout"] >= 2


def test_one_deadline_from_connect_to_the_last_byte() -> None:
    """The transport alone: a trickle of a complete answer takes no longer than the timeout."""
    with raw_peer(HEALTHY, trickle_s=0.1) as peer:  # ~6 s to send it all
        receiver = build_receiver(ReceiverConfig("hook", "webhook", peer.url))
        request = receiver.build_request([alert(1)], 1.0)
        t0 = time.perf_counter()
        with pytest.raises(Exception) as info:
            HttpTransport().send(request, 0.5)
        took_s = time.perf_counter() - t0
    assert getattr(info.value, "reason", None) == "timeout"
    assert took_s < 1.0


class _Boom(BaseException):
    """Something no `except Exception` catches: the thread ends."""


class _FlakyTransport:
    """Ends the delivery thread on the first send, raises a plain bug on the second, then works."""

    def __init__(self) -> None:
        self.calls = 0
        self.sent = 0

    def send(self, request: object, timeout_s: float, *, abort: object = None) -> int:
        self.calls += 1
        if self.calls == 1:
            raise _Boom()
        if self.calls == 2:
            raise RuntimeError("a bug in the transport")
        self.sent += 1
        return 200


def test_a_worker_thread_that_ends_anyway_is_started_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="bubblewatch")
    transport = _FlakyTransport()
    disp = AlertDispatcher(
        [ReceiverConfig("hook", "webhook", "http://127.0.0.1:9/hook", retry=FAST)],
        tmp_path,
        repeat_interval_s=3600,
        transport=transport,
    )
    try:
        disp.notify([alert(1)], now_s=1.0)
        wait_until(lambda: disp.stats()[0].queue_length == 0)
        stats = disp.stats()[0]
        text = metrics_text(disp)
    finally:
        disp.close()
    assert transport.sent == 1
    assert stats.worker_restarts_total == 1
    assert stats.failures["internal"] == 1  # the RuntimeError: counted, retried
    assert 'bubblewatch_alert_worker_restarts_total{receiver="hook"} 1.0' in text
    assert "alert delivery thread had ended; started again" in caplog.text


def test_an_undecodable_queue_row_is_dropped_and_counted(tmp_path: Path) -> None:
    q = PersistentQueue(tmp_path / "alerts-hook.sqlite3", 10)
    q.put({"labels": "not a mapping"}, 1.0)
    transport = _FlakyTransport()
    transport.calls = 2  # works from the start
    receiver = build_receiver(ReceiverConfig("hook", "webhook", "http://127.0.0.1:9/hook"))
    worker = DeliveryWorker(receiver, q, transport, FAST)
    worker.start()
    try:
        wait_until(lambda: worker.stats().queue_length == 0)
        stats = worker.stats()
    finally:
        worker.close()
    assert stats.dropped_total == 1 and stats.deliveries["rejected"] == 1
    assert transport.sent == 0


def test_every_hostile_receiver_at_once_then_healthy_delivers_everything(tmp_path: Path) -> None:
    """All the failure modes side by side (and a trickle) for a while, alerts arriving meanwhile.

    3 s by default; BUBBLEWATCH_SOAK_S=180 runs it for three minutes (a soak).
    """
    soak_s = float(os.environ.get("BUBBLEWATCH_SOAK_S", "3"))
    n = max(2, int(soak_s / 0.5))
    modes = {case: (answer, 0.0) for case, (answer, _) in HOSTILE.items()}
    modes["trickle"] = (HEALTHY, 0.25)
    with ExitStack() as stack:
        peers = {m: stack.enter_context(raw_peer(a, trickle_s=t)) for m, (a, t) in modes.items()}
        cfgs = [ReceiverConfig(m, "webhook", p.url, retry=FAST) for m, p in peers.items()]
        disp = AlertDispatcher(cfgs, tmp_path, repeat_interval_s=3600)
        try:
            sent = []
            for i in range(n):  # an analysis every 0.5 s, a new alert each time
                sent.append(alert(i))
                disp.notify(sent, now_s=10.0 + i)
                time.sleep(0.5)
            during = {s.receiver: s for s in disp.stats()}
            for p in peers.values():
                with p.lock:
                    p.answer, p.trickle_s = HEALTHY, 0.0
            wait_until(lambda: all(s.queue_length == 0 for s in disp.stats()), timeout_s=30)
            after = {s.receiver: s for s in disp.stats()}
        finally:
            disp.close()
    for m, s in during.items():
        assert s.deliveries["success"] == 0, m
        assert s.queue_length == n and s.worker_restarts_total == 0, m
        assert sum(s.failures.values()) >= 1, m
    for m, p in peers.items():
        assert after[m].deliveries["success"] == n and after[m].dropped_total == 0, m
        assert alertnames(p.all_requests())[-n:] == [f"Rule{i}" for i in range(n)], m


def _delivery_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"bubblewatch-deliver-{name}"]


def test_close_detaches_a_worker_stuck_on_a_dead_receiver(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Pins: after `close(0.1)` with an attempt in flight to a receiver that accepts and never
    answers, the worker lived on and, at its deadline, logged "alert queue failed ...
    Cannot operate on a closed database" on the spool closed under it."""
    caplog.set_level(logging.WARNING, logger="bubblewatch")
    policy = RetryPolicy(timeout_s=1.0, initial_backoff_s=0.02, max_backoff_s=0.1)
    with raw_peer(HEALTHY, trickle_s=60.0) as dead:  # reads the request, answers nothing
        disp = AlertDispatcher(
            [ReceiverConfig("dead", "webhook", dead.url, retry=policy)],
            tmp_path,
            repeat_interval_s=3600,
        )
        disp.notify([alert(1)], now_s=1.0)
        wait_until(lambda: len(dead.all_requests()) == 1)
        t0 = time.monotonic()
        disp.close(timeout_s=0.1)
        assert time.monotonic() - t0 < 0.5  # the close does not wait for the attempt
        caplog.clear()
        # The abandoned attempt ends at its own deadline and leaves the spool alone.
        wait_until(lambda: not _delivery_threads("dead"), timeout_s=3.0)
        assert [r.getMessage() for r in caplog.records] == []
    with raw_peer(HEALTHY) as healthy:  # the next start delivers the alert left in the spool
        disp = AlertDispatcher(
            [ReceiverConfig("dead", "webhook", healthy.url, retry=policy)],
            tmp_path,
            repeat_interval_s=3600,
        )
        try:
            wait_until(lambda: disp.stats()[0].queue_length == 0)
            stats = disp.stats()[0]
        finally:
            disp.close()
    assert alertnames(healthy.all_requests()) == ["Rule1"]
    assert stats.deliveries["success"] == 1 and stats.dropped_total == 0
