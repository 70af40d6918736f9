"""Sending one alert under one deadline, on the project's HTTP client (`bubblewatch.http_client`).

Every way an attempt can fail becomes a `DeliveryError` with a `reason` (a
metric label from `REASONS`): a receiver that answers SSH, garbage, HTTP/0.9,
an over-long line or too many headers is a 'protocol' failure, retried like
a 500, never an exception that ends the delivery thread.
"""

from __future__ import annotations

import ssl
from typing import Protocol

from bubblewatch.errors import UnavailableError
from bubblewatch.http_client import Abort, HttpError
from bubblewatch.http_client import request as http_request
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


class DeliveryError(UnavailableError):
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
    def send(self, request: HttpRequest, timeout_s: float, *, abort: Abort | None = None) -> int:
        """Send; return the 2xx status, or raise DeliveryError (at once after `abort.abort()`)."""
        ...


class HttpTransport:
    """Stdlib HTTP(S) client; `ssl_context` for a private CA, None for the system's.

    One deadline per attempt, from connect to the last byte of the answer. A
    success is a complete answer with a 2xx status. Redirects are not
    followed (a 3xx is a failed delivery, retried and counted), and no proxy
    is used: credentials go to the configured host and nowhere else.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context or ssl.create_default_context()

    def send(self, request: HttpRequest, timeout_s: float, *, abort: Abort | None = None) -> int:
        try:
            answer = http_request(
                request.method,
                request.url,
                headers=request.headers,
                body=request.body,
                timeout_s=timeout_s,
                max_bytes=MAX_RESPONSE_BYTES,
                ssl_context=self._ssl_context,
                abort=abort,
            )
        except HttpError as e:
            outcome = "timeout" if e.reason == "timeout" else "error"
            raise DeliveryError(outcome, str(e), reason=e.reason) from None
        _check_status(answer.status)
        return answer.status


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
