"""Sending one HTTP request with a timeout; the only module here that touches the network."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Protocol

from bubblewatch.sinks.alerts.receivers import HttpRequest


class DeliveryError(Exception):
    """A failed delivery. `outcome` is a metric label: 'timeout', 'error' or 'rejected'.

    'rejected' (a 4xx other than 408/425/429) will not succeed on retry; a
    redirect (3xx) is an 'error', retried. The message never contains a URL.
    """

    def __init__(self, outcome: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.outcome != "rejected"


_RETRYABLE_4XX = {408, 425, 429}


class Transport(Protocol):
    def send(self, request: HttpRequest, timeout_s: float) -> int:
        """Send; return the 2xx status, or raise DeliveryError."""
        ...


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would re-send as a body-less GET, with the
    receiver's headers (credentials) to whatever host `Location` names."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class UrllibTransport:
    """Stdlib HTTP(S) client; `ssl_context` for a private CA, None for the system's.

    Redirects are not followed: a 3xx is a failed delivery, retried and counted.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._opener = urllib.request.build_opener(
            _NoRedirect(), urllib.request.HTTPSHandler(context=ssl_context)
        )

    def send(self, request: HttpRequest, timeout_s: float) -> int:
        req = urllib.request.Request(
            request.url, data=request.body, headers=dict(request.headers), method=request.method
        )
        try:
            with self._opener.open(req, timeout=timeout_s) as resp:
                resp.read(65536)
                status = int(resp.status)
        except urllib.error.HTTPError as e:
            status = int(e.code)
            e.close()
            if 300 <= status < 400:
                raise DeliveryError(
                    "error", f"HTTP {status}: redirects are not followed", status
                ) from None
            permanent = 400 <= status < 500 and status not in _RETRYABLE_4XX
            outcome = "rejected" if permanent else "error"
            raise DeliveryError(outcome, f"HTTP {status}", status) from None
        except TimeoutError as e:
            raise DeliveryError("timeout", f"no answer within {timeout_s:g} s") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise DeliveryError("timeout", f"no answer within {timeout_s:g} s") from None
            raise DeliveryError("error", _reason(e.reason)) from None
        except (OSError, ValueError) as e:
            raise DeliveryError("error", _reason(e)) from None
        if not 200 <= status < 300:  # a 1xx/3xx that reached here: not a delivery
            raise DeliveryError("error", f"HTTP {status}", status)
        return status


def _reason(reason: object) -> str:
    """Exception text without URLs (an OSError names the errno, not the URL)."""
    if isinstance(reason, OSError) and reason.strerror:
        return f"{type(reason).__name__}: {reason.strerror}"
    return type(reason).__name__ if not isinstance(reason, str) else "connection failed"
