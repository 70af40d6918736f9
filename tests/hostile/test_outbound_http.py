"""Every outbound HTTP client against the same hostile peers: one policy, one set of answers.

The three clients (alert receivers, the Prometheus history client, the engine
endpoints) were separate: the Prometheus client followed redirects with
credentials and, like the engine reader, let a peer trickling a byte at a
time hold a request far past its timeout (the timeout was per read). All now
send through `bubblewatch.http_client`; each peer below (loopback only) is
played against each client: a trickle, a redirect with credentials, an
answer that is not HTTP, a huge body (announced or not), a peer that closes
at once. No client may raise anything but its own error type, follow a
redirect, or outlast its deadline.
"""

from __future__ import annotations

import base64
import time
import urllib.request
from collections.abc import Callable

import pytest

import bubblewatch.sources.prometheus_history.client as prom_client
from bubblewatch.sinks.alerts.receivers import HttpRequest
from bubblewatch.sinks.alerts.transport import DeliveryError, HttpTransport
from bubblewatch.sources._http import classify, fetch
from bubblewatch.sources.prometheus_history.client import PrometheusClient
from bubblewatch.sources.prometheus_history.matrix import PrometheusError

from ._http import raw_peer

SECRET = "s3cr3t-pass"
BASIC = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
MAX_BYTES = 64 * 1024
TIMEOUT_S = 2.0


def _receiver(url: str) -> str:
    try:
        HttpTransport().send(
            HttpRequest(url, b"{}", {"Authorization": BASIC, "Content-Type": "application/json"}),
            TIMEOUT_S,
        )
    except DeliveryError as e:
        return f"{e.reason}: {e}"
    return "ok"


def _prometheus(url: str) -> str:
    with_creds = url.replace("http://", f"http://user:{SECRET}@")
    try:
        PrometheusClient(with_creds, timeout_s=TIMEOUT_S).series(["up"], 0, 1)
    except PrometheusError as e:
        return str(e)
    return "ok"


def _engine(url: str) -> str:
    req = urllib.request.Request(url, headers={"Authorization": BASIC})
    try:
        fetch(req, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES)
    except Exception as e:  # the engine readers classify whatever fetch raises
        kind, reason = classify(e)
        assert kind != "error", f"an unmapped {type(e).__name__}: {e}"
        return f"{kind}: {reason}"
    return "ok"


CLIENTS: dict[str, Callable[[str], str]] = {
    "receiver": _receiver,
    "prometheus": _prometheus,
    "engine": _engine,
}


@pytest.fixture(autouse=True)
def _small_prometheus_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Prometheus client's own bound is 256 MiB; the same code path, 64 KiB here.
    monkeypatch.setattr(prom_client, "PROMETHEUS_MAX_RESPONSE_BYTES", MAX_BYTES)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_trickle_cannot_outlast_the_deadline(client: str) -> None:
    """A peer sending one byte every 0.5 s (a 60-byte answer: 30 s) is cut at the 2 s deadline."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    with raw_peer(answer, trickle_s=0.5) as peer:
        t0 = time.monotonic()
        got = CLIENTS[client](peer.url)
        took_s = time.monotonic() - t0
    assert took_s < TIMEOUT_S + 1.0, f"{client} held {took_s:.1f} s"
    assert "within 2 s" in got and got != "ok"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_redirect_is_never_followed_and_credentials_stay_home(client: str) -> None:
    with raw_peer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}") as elsewhere:
        moved = (
            f"HTTP/1.1 302 Found\r\nLocation: {elsewhere.url}\r\nContent-Length: 0\r\n\r\n"
        ).encode()
        with raw_peer(moved) as peer:
            got = CLIENTS[client](peer.url)
            asked = peer.all_requests()
        time.sleep(0.2)
        assert elsewhere.all_requests() == []
    assert len(asked) == 1 and BASIC.encode() in asked[0]  # sent to its own origin only
    assert "302" in got and SECRET not in got


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("answer", "expect"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "BadStatusLine"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "ended early"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n{}", "larger than 65536"),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * (MAX_BYTES + 4096), "larger than 65536"),
        (b"", "closed without an answer"),
    ],
    ids=["not-http", "broken-chunks", "huge-announced", "huge-unannounced", "closed"],
)
def test_a_broken_answer_is_the_clients_own_error(client: str, answer: bytes, expect: str) -> None:
    with raw_peer(answer) as peer:
        got = CLIENTS[client](peer.url)
    assert expect in got, got
    assert SECRET not in got


def test_the_prometheus_client_keeps_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """urllib honoured http_proxy/no_proxy; the shared client does too (Prometheus only)."""
    answer = b'HTTP/1.1 200 OK\r\nContent-Length: 31\r\n\r\n{"status":"success","data":[]}\n'
    with raw_peer(answer) as proxy:
        monkeypatch.setenv("http_proxy", f"http://puser:ppass@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("no_proxy", "")
        client = PrometheusClient(f"http://user:{SECRET}@prom.invalid:9090", timeout_s=TIMEOUT_S)
        assert client.series(["up"], 0, 1) == []
        (sent,) = proxy.all_requests()
        assert sent.startswith(b"GET http://prom.invalid:9090/api/v1/series?")
        proxy_auth = base64.b64encode(b"puser:ppass").decode()
        assert f"Proxy-Authorization: Basic {proxy_auth}".encode() in sent
        assert BASIC.encode() in sent
        monkeypatch.setenv("no_proxy", "prom.invalid")  # bypassed: straight to the host
        with pytest.raises(PrometheusError, match="cannot reach the server"):
            client.series(["up"], 0, 1)
        # Receivers and engine endpoints never use a proxy: straight to a closed port.
        monkeypatch.setenv("no_proxy", "")
        assert _engine("http://127.0.0.1:1/").startswith("connection")
        assert _receiver("http://127.0.0.1:1/").startswith("connection")
        assert len(proxy.all_requests()) == 1
