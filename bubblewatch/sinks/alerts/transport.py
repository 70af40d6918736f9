"""Sending one HTTP request under one deadline; the only module here that touches the network.

Every way an attempt can fail becomes a `DeliveryError` with a `reason` (a
metric label from `REASONS`): a receiver that answers SSH, garbage, HTTP/0.9,
an over-long line or too many headers is a 'protocol' failure, retried like
a 500, never an exception that ends the delivery thread.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
import urllib.parse
from typing import Protocol

from bubblewatch.sinks.alerts.receivers import HttpRequest

# Why an attempt failed, as the `reason` label of the delivery-failure metric.
REASONS = (
    "http_status",  # a non-2xx status (4xx/5xx, or a 1xx that ended the exchange)
    "redirect",  # a 3xx: never followed
    "timeout",  # the attempt's deadline passed (connect to last byte)
    "connection",  # refused, reset, DNS, TLS
    "protocol",  # not an HTTP answer: SSH banner, garbage, HTTP/0.9, too many headers
    "incomplete",  # the body ended before its Content-Length or last chunk
    "too_large",  # a body over MAX_RESPONSE_BYTES
    "internal",  # anything else (a bug): counted and retried, never fatal
)
# A receiver's answer body is read (and discarded) up to this size; more is not an answer.
MAX_RESPONSE_BYTES = 64 * 1024


class DeliveryError(Exception):
    """A failed delivery. `outcome` is a metric label: 'timeout', 'error' or 'rejected'.

    'rejected' (a 4xx other than 408/425/429) will not succeed on retry; a
    redirect (3xx) is an 'error', retried. `reason` is one of `REASONS`. The
    message never contains a URL.
    """

    def __init__(
        self, outcome: str, message: str, status: int | None = None, *, reason: str = "internal"
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.outcome != "rejected"


_RETRYABLE_4XX = {408, 425, 429}


class Transport(Protocol):
    def send(self, request: HttpRequest, timeout_s: float) -> int:
        """Send; return the 2xx status, or raise DeliveryError."""
        ...


class _DeadlineReader(io.RawIOBase):
    """Socket reads that all end by one monotonic deadline (a trickle cannot stretch it)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        self._sock.settimeout(_left_s(self._deadline))
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What `http.client.HTTPResponse` reads the answer through."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._raw = _DeadlineReader(sock, deadline)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self._raw)


def _left_s(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


class HttpTransport:
    """Stdlib HTTP(S) client; `ssl_context` for a private CA, None for the system's.

    One deadline per attempt, from connect to the last byte of the answer. A
    success is a complete answer with a 2xx status. Redirects are not
    followed (a 3xx is a failed delivery, retried and counted), and no proxy
    is used: credentials go to the configured host and nowhere else.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context or ssl.create_default_context()

    def send(self, request: HttpRequest, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        try:
            return self._send(request, deadline)
        except DeliveryError:
            raise
        except TimeoutError:
            raise DeliveryError(
                "timeout", f"no complete answer within {timeout_s:g} s", reason="timeout"
            ) from None
        except http.client.RemoteDisconnected:  # closed before a status line
            raise DeliveryError("error", "closed without an answer", reason="connection") from None
        except http.client.IncompleteRead:
            raise DeliveryError("error", "the answer ended early", reason="incomplete") from None
        except http.client.HTTPException as e:
            raise DeliveryError(
                "error", f"not an HTTP answer ({type(e).__name__})", reason="protocol"
            ) from None
        except OSError as e:  # refused, reset, DNS, TLS (ssl.SSLError is an OSError)
            raise DeliveryError("error", _reason(e), reason="connection") from None
        except ValueError as e:  # e.g. a port out of range, a header http.client refuses
            raise DeliveryError("error", type(e).__name__, reason="internal") from None

    def _send(self, request: HttpRequest, deadline: float) -> int:
        parts = urllib.parse.urlsplit(request.url)
        host = parts.hostname or ""
        https = parts.scheme == "https"
        conn = (  # formats the request; the socket is ours
            http.client.HTTPSConnection(host, parts.port, context=self._ssl_context)
            if https
            else http.client.HTTPConnection(host, parts.port)
        )
        sock = socket.create_connection((host, conn.port), timeout=_left_s(deadline))
        try:
            if https:
                sock.settimeout(_left_s(deadline))
                sock = self._ssl_context.wrap_socket(sock, server_hostname=host)
            conn.sock = sock
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            sock.settimeout(_left_s(deadline))
            conn.request(
                request.method, path, body=request.body,
                headers={**request.headers, "Connection": "close"},
            )  # fmt: skip
            resp = http.client.HTTPResponse(
                _DeadlineSocket(sock, deadline),  # type: ignore[arg-type]
                method=request.method,
            )
            resp.begin()
            status = int(resp.status)
            _check_status(status)
            body = resp.read(MAX_RESPONSE_BYTES + 1)
            if len(body) > MAX_RESPONSE_BYTES:
                raise DeliveryError(
                    "error", f"answer body over {MAX_RESPONSE_BYTES} bytes", status,
                    reason="too_large",
                )  # fmt: skip
            if resp.length:  # Content-Length not reached: the peer closed early
                raise http.client.IncompleteRead(body, resp.length)
            return status
        finally:
            sock.close()


def _check_status(status: int) -> None:
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise DeliveryError(
            "error", f"HTTP {status}: redirects are not followed", status, reason="redirect"
        )
    permanent = 400 <= status < 500 and status not in _RETRYABLE_4XX
    outcome = "rejected" if permanent else "error"
    raise DeliveryError(outcome, f"HTTP {status}", status, reason="http_status")


def _reason(reason: OSError) -> str:
    """Exception text without URLs (an OSError names the errno, not the URL)."""
    if reason.strerror:
        return f"{type(reason).__name__}: {reason.strerror}"
    return type(reason).__name__
