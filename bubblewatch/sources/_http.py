"""One bounded HTTP GET or POST to a local engine, and the kinds its failures fall into.

Shared by the engine readers (`engine_metrics`, `engine_state`), on the
project's HTTP client (`bubblewatch.http_client`): no proxy (the endpoint is
on this host, and a proxy must not see it), no redirects (a header meant for
the engine never follows one elsewhere), one deadline for the whole answer
and a cap on its size.
"""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request

from bubblewatch.errors import BubblewatchError
from bubblewatch.http_client import HttpError
from bubblewatch.http_client import request as http_request

__all__ = ["AnswerError", "classify", "fetch"]


class AnswerError(BubblewatchError, ValueError):
    """The endpoint answered, but with something that is not what was asked for."""


def fetch(req: urllib.request.Request, *, timeout_s: float, max_bytes: int) -> str:
    """The answer's text, complete within `timeout_s` and at most `max_bytes` long.

    A status other than 2xx (a redirect too) is an `urllib.error.HTTPError`.
    """
    url = req.full_url
    answer = http_request(
        req.get_method(),
        url,
        headers=dict(req.header_items()),
        body=req.data if isinstance(req.data, bytes) else None,
        timeout_s=timeout_s,
        max_bytes=max_bytes,
    )
    if not 200 <= answer.status < 300:
        note = " (redirect not followed)" if 300 <= answer.status < 400 else ""
        raise urllib.error.HTTPError(
            url, answer.status, answer.reason + note, http.client.HTTPMessage(), None
        )
    return answer.body.decode("utf-8", errors="replace")


def classify(e: BaseException) -> tuple[str, str]:
    """(kind, reason) of a failed read: timeout, connection, http, parse, too-large, error."""
    if isinstance(e, urllib.error.HTTPError):
        return "http", f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        inner = e.reason
        if isinstance(inner, (TimeoutError, socket.timeout)):
            return "timeout", "timed out"
        return "connection", f"cannot connect: {inner}"
    if isinstance(e, HttpError):
        if e.reason == "timeout":
            return "timeout", f"timed out: {e}"
        if e.reason == "too_large":
            return "too-large", str(e)
        return "connection", f"cannot connect: {e}"
    if isinstance(e, (TimeoutError, socket.timeout)):
        return "timeout", f"timed out: {e}" if str(e) else "timed out"
    if isinstance(e, AnswerError):
        return "parse", str(e)
    if isinstance(e, ConnectionRefusedError):
        return "connection", f"cannot connect: {e}"
    if isinstance(e, (ConnectionError, http.client.HTTPException, OSError)):
        return "connection", f"connection failed: {type(e).__name__}: {e}"
    return "error", f"{type(e).__name__}: {e}"
