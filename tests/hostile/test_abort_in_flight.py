"""Closing the alert dispatcher aborts the request in flight, over real loopback sockets.

Pins: a delivery thread posting to a receiver that accepts and never answers
ran until the attempt's own timeout; close gave up on it after its bound and
left the thread behind, so a stop always took that bound (2 s at SIGTERM),
and a receiver whose host never completed the TCP handshake held a thread for
the whole timeout. Now close shuts the socket down from the closing thread:
the stop takes milliseconds, the alert stays in the spool, nothing is counted
as a failed delivery, and the next start delivers it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubblewatch.http_client import Abort, HttpError, request
from bubblewatch.sinks.alerts import AlertDispatcher, ReceiverConfig, RetryPolicy

from ._alerts import alert, metrics_text, wait_until
from ._http import HangingReceiver, endpoint

SLOW = RetryPolicy(timeout_s=30.0, initial_backoff_s=0.02, max_backoff_s=0.1)


@pytest.fixture
def hanging() -> Iterator[HangingReceiver]:
    rec = HangingReceiver()
    try:
        yield rec
    finally:
        rec.close()


@contextlib.contextmanager
def unanswered_handshakes() -> Iterator[int]:
    """A port whose accept queue is full, so a new connect is never completed (SYNs dropped)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        fillers.append(s)
    time.sleep(0.1)
    try:
        yield port
    finally:
        for s in fillers:
            s.close()
        srv.close()


def spooled(state_dir: Path, name: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(state_dir / f"alerts-{name}.sqlite3")) as db:
        rows = db.execute("SELECT payload FROM items ORDER BY id").fetchall()
    return [json.loads(p)["labels"]["alertname"] for (p,) in rows]


def test_close_aborts_a_request_the_receiver_never_answers(
    hanging: HangingReceiver, tmp_path: Path
) -> None:
    disp = AlertDispatcher(
        [ReceiverConfig("hook", "webhook", hanging.url, retry=SLOW)], tmp_path,
        repeat_interval_s=3600,
    )  # fmt: skip
    disp.notify([alert(1)], now_s=1.0)
    assert hanging.asked.wait(10.0), "the alert was never sent"
    time.sleep(0.2)  # the worker is now waiting for the answer, 30 s away
    t0 = time.monotonic()
    disp.close(timeout_s=5.0)
    took_s = time.monotonic() - t0
    assert took_s < 2.0, f"close took {took_s:.2f} s against a 30 s receiver timeout"
    assert hanging.closed_by_peer.wait(2.0), "the connection was left open"
    assert spooled(tmp_path, "hook") == ["Rule1"]  # kept for the next start
    text = metrics_text(disp)
    assert 'bubblewatch_webhook_deliveries_total{outcome="timeout",receiver="hook"} 0.0' in text
    assert 'bubblewatch_webhook_deliveries_total{outcome="error",receiver="hook"} 0.0' in text

    # The next start delivers it, once.
    with endpoint() as good:
        again = AlertDispatcher(
            [ReceiverConfig("hook", "webhook", good.url, retry=SLOW)], tmp_path,
            repeat_interval_s=3600,
        )  # fmt: skip
        try:
            hits = good.wait_hits(1)
            wait_until(lambda: again.stats()[0].queue_length == 0)
        finally:
            again.close()
    assert [a["labels"]["alertname"] for a in json.loads(hits[0].body)["alerts"]] == ["Rule1"]
    assert len(good.all_hits()) == 1
    assert spooled(tmp_path, "hook") == []


def test_close_aborts_every_stuck_receiver_at_once(tmp_path: Path) -> None:
    receivers = [HangingReceiver() for _ in range(3)]
    try:
        configs = [
            ReceiverConfig(f"r{i}", "webhook", r.url, retry=SLOW) for i, r in enumerate(receivers)
        ]
        disp = AlertDispatcher(configs, tmp_path, repeat_interval_s=3600)
        disp.notify([alert(1), alert(2)], now_s=1.0)
        assert all(r.asked.wait(10.0) for r in receivers)
        t0 = time.monotonic()
        disp.close(timeout_s=5.0)
        took_s = time.monotonic() - t0
    finally:
        for r in receivers:
            r.close()
    assert took_s < 2.0, took_s
    assert [spooled(tmp_path, f"r{i}") for i in range(3)] == [["Rule1", "Rule2"]] * 3


def test_abort_wakes_a_connect_that_never_completes() -> None:
    with unanswered_handshakes() as port:
        handle = Abort()
        threading.Timer(0.3, handle.abort).start()
        t0 = time.monotonic()
        with pytest.raises(HttpError) as e:
            request("POST", f"http://127.0.0.1:{port}/", body=b"{}", timeout_s=30.0,
                    max_bytes=1024, abort=handle)  # fmt: skip
        took_s = time.monotonic() - t0
    assert e.value.reason == "aborted"
    assert 0.25 <= took_s < 2.0, took_s


def test_abort_wakes_a_tls_handshake_the_peer_never_answers(hanging: HangingReceiver) -> None:
    handle = Abort()
    threading.Timer(0.3, handle.abort).start()
    t0 = time.monotonic()
    with pytest.raises(HttpError) as e:
        request("GET", hanging.url.replace("http://", "https://"), timeout_s=30.0,
                max_bytes=1024, ssl_context=ssl.create_default_context(), abort=handle)  # fmt: skip
    assert e.value.reason == "aborted"
    assert time.monotonic() - t0 < 2.0


def test_an_aborted_handle_fails_every_later_request_at_once() -> None:
    handle = Abort()
    handle.abort()
    with endpoint() as good:
        with pytest.raises(HttpError) as e:
            request("GET", good.url, timeout_s=5.0, max_bytes=1024, abort=handle)
        assert good.all_hits() == []  # never connected
    assert e.value.reason == "aborted"


def test_an_answer_complete_before_the_abort_is_an_answer() -> None:
    handle = Abort()
    with endpoint() as good:
        answer = request("GET", good.url, timeout_s=5.0, max_bytes=1024, abort=handle)
    handle.abort()  # after the fact: nothing to wake, no error
    assert answer.status == 200 and handle.aborted


def test_close_ends_a_delivery_stuck_in_a_name_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead resolver: the lookup never answers. Close takes milliseconds, the alert stays.

    Before, the worker could not be woken from the lookup: close waited out
    its bound and left the thread behind.
    """
    release, asked = threading.Event(), threading.Event()

    def dead_resolver(host: str, *args: object, **kwargs: object) -> object:
        asked.set()
        release.wait(30.0)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", dead_resolver)
    try:
        disp = AlertDispatcher(
            [ReceiverConfig("hook", "webhook", "http://hooks.example.test/alert", retry=SLOW)],
            tmp_path, repeat_interval_s=3600,
        )  # fmt: skip
        disp.notify([alert(1)], now_s=1.0)
        assert asked.wait(10.0), "the name was never looked up"
        t0 = time.monotonic()
        disp.close(timeout_s=5.0)
        took_s = time.monotonic() - t0
    finally:
        release.set()
    assert took_s < 0.5, f"close took {took_s:.2f} s with a lookup in flight"
    assert spooled(tmp_path, "hook") == ["Rule1"]
    text = metrics_text(disp)
    assert 'bubblewatch_webhook_deliveries_total{outcome="error",receiver="hook"} 0.0' in text
