"""The endpoint counts what it turns away, by reason, on its own /metrics (real sockets).

Pins: fast 503s past `max_requests`, connections closed at the connection
cap and clients cut off at the head deadline were only logged (rate-limited),
so an operator could not see from Prometheus that scrapes were refused.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bubblewatch.daemon.http.connections import ConnectionLoop, Limits
from bubblewatch.daemon.http.message import Request, Response
from bubblewatch.daemon.http.refusals import REJECTED_METRIC, Refusal
from bubblewatch.daemon.http.server import MetricsServer
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sinks.snapshot import ExporterSnapshot

from ._http import raw_get, slow_clients

REASONS = {r.value for r in Refusal}


def rejected(port: int) -> dict[str, float]:
    """reason -> count, scraped from /metrics over HTTP."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name + "_total" == REJECTED_METRIC:
            totals = [s for s in family.samples if s.name == REJECTED_METRIC]
            return {s.labels["reason"]: s.value for s in totals}
    raise AssertionError(f"{REJECTED_METRIC} not on /metrics")


@contextmanager
def server(endpoint_cls: type[MetricsServer], **kwargs: object) -> Iterator[MetricsServer]:
    srv = endpoint_cls("127.0.0.1:0", make_registry(ExporterSnapshot), **kwargs)  # type: ignore[arg-type]
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def closed_by_server(s: socket.socket, timeout_s: float = 5.0) -> bool:
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_every_reason_starts_at_zero(endpoint_cls: type[MetricsServer]) -> None:
    with server(endpoint_cls) as srv:
        assert rejected(srv.port) == dict.fromkeys(REASONS, 0.0)


def test_fast_503_past_max_requests_is_counted(endpoint_cls: type[MetricsServer]) -> None:
    gate = threading.Event()
    with server(endpoint_cls, max_requests=1, ready=lambda: gate.wait(10)) as srv:
        held = threading.Thread(target=raw_get, args=(srv.port, "/-/ready"), daemon=True)
        held.start()  # holds the only worker until the gate opens
        time.sleep(0.2)
        statuses = [raw_get(srv.port)[0] for _ in range(3)]
        gate.set()
        held.join(5)
        assert statuses == [503, 503, 503]
        counts = rejected(srv.port)
    assert counts["max_requests"] == 3
    assert sum(counts.values()) == 3


def test_connections_closed_at_the_cap_are_counted(endpoint_cls: type[MetricsServer]) -> None:
    with server(endpoint_cls, max_connections=4) as srv:
        clients = slow_clients(srv.port, 6)  # the 5th and 6th each replace the oldest
        try:
            assert closed_by_server(clients[0]) and closed_by_server(clients[1])
            counts = rejected(srv.port)  # the scrape's own connection replaces one more
        finally:
            for s in clients:
                s.close()
    assert counts["connections"] == 3
    assert counts["deadline"] == 0 and counts["max_requests"] == 0


def test_deadlines_and_bad_heads_are_counted(endpoint_cls: type[MetricsServer]) -> None:
    with server(endpoint_cls, request_timeout_s=0.3) as srv:
        silent = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        (half,) = slow_clients(srv.port, 1)
        try:
            assert closed_by_server(silent) and closed_by_server(half)
            with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n")
                assert s.recv(64).startswith(b"HTTP/1.1 431 ")
            counts = rejected(srv.port)
        finally:
            silent.close()
            half.close()
    assert counts["deadline"] == 2
    assert counts["bad_request"] == 1
    assert counts["connections"] == 0


def test_an_idle_kept_alive_connection_closing_is_no_refusal() -> None:
    """The idle time-out ends a finished conversation; only a stalled request counts."""
    listener = socket.create_server(("127.0.0.1", 0))
    limits = Limits(header_timeout_s=0.3, idle_timeout_s=0.3)

    def ok(request: Request, client: str) -> Response:
        return Response(HTTPStatus.OK, b"ok\n")

    loop = ConnectionLoop(listener, ok, tls=lambda: None, limits=limits)
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    try:
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(1024).startswith(b"HTTP/1.1 200 ")
            assert closed_by_server(s)  # idle past 0.3 s
        assert loop.refusals.snapshot()[Refusal.DEADLINE] == 0
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HT")  # a second head, stalled
            assert s.recv(1024).startswith(b"HTTP/1.1 200 ")
            assert closed_by_server(s)
        assert loop.refusals.snapshot()[Refusal.DEADLINE] == 1
    finally:
        loop.stop()
        t.join(5)
        listener.close()


def test_the_counter_is_documented() -> None:
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/daemon.md"):
        assert "_http_requests_rejected_total" in (root / doc).read_text(), doc
    table = (root / "docs" / "daemon.md").read_text()
    assert f"| `{REJECTED_METRIC}` | counter | reason |" in table
    assert all(f"`{r}`" in table for r in REASONS)
