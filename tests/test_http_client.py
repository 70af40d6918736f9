"""`http_client.request`'s `timeout_s` bounds the whole request, over real loopback sockets.

Regression: `socket.create_connection` gave each address a name resolves to
the whole timeout, so a name with two silent addresses held a 0.5 s request
for 1 s (with N addresses, N times the timeout).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile._http import raw_peer

from bubblewatch.http_client import Abort, HttpError, request
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


class StuckResolver:
    """A system resolver whose lookups of host names hang until released (a dead DNS server)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []
        self.threads: list[str] = []  # the thread each lookup ran on
        self._real = socket.getaddrinfo

    def __call__(self, host: str, port: int, *args: object, **kwargs: object) -> object:
        self.calls.append(host)
        self.threads.append(threading.current_thread().name)
        if host.endswith(".test"):
            self.release.wait(10.0)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return self._real(host, port, *args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch) -> Iterator[StuckResolver]:
    resolver = StuckResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    yield resolver
    resolver.release.set()


def test_a_hanging_name_lookup_ends_at_the_requests_deadline(stuck: StuckResolver) -> None:
    """Regression: the lookup had no deadline (a dead resolver held a 0.3 s request for ~10 s)."""
    t0 = time.monotonic()
    with pytest.raises(HttpError) as err:
        request("POST", "http://hooks.test/alert", body=b"{}", timeout_s=0.3, max_bytes=1024)
    took_s = time.monotonic() - t0
    assert err.value.reason == "timeout"
    assert str(err.value) == "no complete answer within 0.3 s"
    assert 0.25 < took_s < 0.8, f"held {took_s:.2f} s for a 0.3 s deadline"
    assert "hooks.test" not in str(err.value)


def test_an_abort_ends_a_wait_for_a_name_lookup(stuck: StuckResolver) -> None:
    handle = Abort()
    threading.Timer(0.2, handle.abort).start()
    t0 = time.monotonic()
    with pytest.raises(HttpError) as err:
        request("GET", "http://hooks.test/", timeout_s=10.0, max_bytes=1024, abort=handle)
    assert err.value.reason == "aborted"
    assert time.monotonic() - t0 < 1.0


def test_requests_for_one_name_share_the_lookup_in_flight(stuck: StuckResolver) -> None:
    """A dead resolver holds one thread per name, not one per attempt."""
    for _ in range(5):
        with pytest.raises(HttpError):
            request("GET", "http://hooks.test/", timeout_s=0.1, max_bytes=1024)
    assert stuck.calls.count("hooks.test") == 1
    stuck.release.set()  # the resolver gives up: the next request looks the name up again
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(
        t.name == "name-lookup" for t in threading.enumerate()
    ):
        time.sleep(0.01)
    with pytest.raises(HttpError) as err:
        request("GET", "http://hooks.test/", timeout_s=1.0, max_bytes=1024)
    assert err.value.reason == "connection"  # the resolver's failure, not a timeout
    assert stuck.calls.count("hooks.test") == 2


def test_an_ip_address_is_not_looked_up_on_a_thread(stuck: StuckResolver) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    with raw_peer(answer) as peer:
        got = request("GET", f"http://127.0.0.1:{peer.port}/", timeout_s=2.0, max_bytes=1024)
        named = request("GET", f"http://localhost:{peer.port}/", timeout_s=2.0, max_bytes=1024)
    assert (got.status, got.body, named.status) == (200, b"ok", 200)
    ran_on = dict(zip(stuck.calls, stuck.threads, strict=True))
    assert ran_on["127.0.0.1"] == threading.current_thread().name
    assert ran_on["localhost"] == "name-lookup"
