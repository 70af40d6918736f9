"""`http_client.request`'s `timeout_s` bounds the whole request, over real loopback sockets.

Regression: `socket.create_connection` gave each address a name resolves to
the whole timeout, so a name with two silent addresses held a 0.5 s request
for 1 s (with N addresses, N times the timeout).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile._http import raw_peer

from bubblewatch.http_client import HttpError, request
from bubblewatch.sources.engine_metrics import EngineMetricsReader

REAL = (Path(__file__).parent / "fixtures" / "engine_metrics" / "vllm-0.32-cpu.txt").read_bytes()


@contextlib.contextmanager
def silent_address() -> Iterator[tuple[str, int]]:
    """A loopback address whose connects hang: a listener with a full accept queue."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    fillers = []
    for _ in range(3):  # never accepted: the queue fills and later SYNs are dropped
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setblocking(False)
        c.connect_ex(srv.getsockname())
        fillers.append(c)
    try:
        yield srv.getsockname()
    finally:
        for c in fillers:
            c.close()
        srv.close()


def test_two_silent_addresses_share_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    with silent_address() as first, silent_address() as second:
        probe = socket.socket()
        probe.settimeout(0.2)
        try:
            probe.connect(first)
        except TimeoutError:
            pass
        else:
            pytest.skip("this kernel completes connects to a full accept queue")
        finally:
            probe.close()
        found = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in (first, second)]
        monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: found)
        t0 = time.monotonic()
        with pytest.raises(HttpError) as err:
            request("GET", "http://engine.test:8000/metrics", timeout_s=0.5, max_bytes=1024)
        took_s = time.monotonic() - t0
    assert err.value.reason == "timeout"
    assert took_s < 0.85, f"held {took_s:.2f} s for a 0.5 s deadline"  # was 1.0 s


def test_a_refused_address_leaves_the_rest_of_the_deadline_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = closed.getsockname()
    closed.close()  # nothing listens there now
    with raw_peer(answer) as peer:
        found = [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", a)
            for a in (refused, ("127.0.0.1", peer.port))
        ]
        monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: found)
        got = request("GET", "http://engine.test/metrics", timeout_s=2.0, max_bytes=1024)
    assert (got.status, got.body) == (200, b"ok")


def test_a_trickled_metrics_page_is_cut_at_the_readers_deadline() -> None:
    """The real vLLM page, one byte every 10 ms (11 minutes): the read ends at 0.5 s."""
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(REAL)}\r\n\r\n".encode()
    with raw_peer(head + REAL, trickle_s=0.01) as peer:
        reader = EngineMetricsReader(peer.url, timeout_s=0.5)
        t0 = time.monotonic()
        reading = reader.read()
        took_s = time.monotonic() - t0
    assert reading.sample is None and reader.failures == {"timeout": 1}
    assert took_s < 0.9, f"held {took_s:.2f} s for a 0.5 s deadline"


def test_the_same_page_sent_at_once_reads() -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(REAL)}\r\n\r\n".encode()
    with raw_peer(head + REAL) as peer:
        reading = EngineMetricsReader(peer.url, timeout_s=2.0).read()
    assert reading.sample is not None and (reading.sample.running, reading.sample.queued) == (
        0.0,
        0.0,
    )
