"""One bounded HTTP GET or POST to a local engine, and the kinds its failures fall into.

Shared by the engine readers (`engine_metrics`, `engine_state`): no proxy (the
endpoint is on this host, and a proxy must not see it), no redirects (a header
meant for the engine never follows one elsewhere), a deadline on the whole
answer and a cap on its size.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["AnswerError", "TooLarge", "classify", "fetch", "opener"]


class AnswerError(ValueError):
    """The endpoint answered, but with something that is not what was asked for."""


class TooLarge(ValueError):
    """The answer is larger than the reader accepts."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, *rest: Any) -> None:
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({msg})", {}, fp)  # type: ignore[arg-type]


def opener() -> urllib.request.OpenerDirector:
    """An opener with no proxies and no redirects."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def fetch(
    open_: urllib.request.OpenerDirector,
    req: urllib.request.Request,
    *,
    timeout_s: float,
    max_bytes: int,
) -> str:
    """The answer's text, read within `timeout_s` and at most `max_bytes` long."""
    deadline = time.monotonic() + timeout_s
    with open_.open(req, timeout=timeout_s) as resp:
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete answer within {timeout_s:g} s")
            chunk = resp.read(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise TooLarge(f"answer larger than {max_bytes} bytes")
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def classify(e: BaseException) -> tuple[str, str]:
    """(kind, reason) of a failed read: timeout, connection, http, parse, too-large, error."""
    if isinstance(e, urllib.error.HTTPError):
        return "http", f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        inner = e.reason
        if isinstance(inner, (TimeoutError, socket.timeout)):
            return "timeout", "timed out"
        return "connection", f"cannot connect: {inner}"
    if isinstance(e, (TimeoutError, socket.timeout)):
        return "timeout", f"timed out: {e}" if str(e) else "timed out"
    if isinstance(e, TooLarge):
        return "too-large", str(e)
    if isinstance(e, AnswerError):
        return "parse", str(e)
    if isinstance(e, (ConnectionError, http.client.HTTPException, OSError)):
        return "connection", f"connection failed: {type(e).__name__}: {e}"
    return "error", f"{type(e).__name__}: {e}"
