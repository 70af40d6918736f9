"""A small client for Prometheus's HTTP API (`query_range`, `series`), on urllib.

The network is one seam, `transport`, so tests can answer without a server.
Errors become `PrometheusError` naming the server (without credentials) and
what went wrong; header values (tokens) never appear in messages. Requests
go through the project's HTTP client (`bubblewatch.http_client`): redirects
are never followed (urllib would re-send every header, the Authorization
too, to whatever host `Location` names), `timeout` is one deadline for the
whole answer, the environment's proxy (`https_proxy`, `http_proxy`,
`no_proxy`) is used as urllib did, and an answer is read up to
PROMETHEUS_MAX_RESPONSE_BYTES (docs/daemon.md, "Limits") and refused beyond,
before it is decoded. Answers become columns in `matrix.py`.
A client may be shared by threads (each call is one request; nothing is
cached).
"""

from __future__ import annotations

import base64
import http.client
import io
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from bubblewatch.http_client import HttpError, env_proxy
from bubblewatch.http_client import request as http_request
from bubblewatch.limits import BOUNDED_JSON, LIMITS_DOC, PROMETHEUS_MAX_RESPONSE_BYTES
from bubblewatch.sources.prometheus_history.matrix import (
    PrometheusError,
    RangeSeries,
    decode_answer,
    parse_matrix,
)

__all__ = ["MAX_POINTS", "PrometheusClient", "redact_url"]

# Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 11_000
_CHUNK_POINTS = 10_000
_ERROR_BODY_BYTES = 64 << 10  # of an HTTP error's body, for its message

Transport = Callable[[urllib.request.Request, float], bytes]


def redact_url(url: str) -> str:
    """The URL without user:password and without the query string."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, _netloc(parts), parts.path, "", ""))


def _netloc(parts: urllib.parse.SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return host + (f":{parts.port}" if parts.port else "")


def _send(request: urllib.request.Request, timeout_s: float) -> bytes:
    """GET on the project's HTTP client: one deadline, bounded, no redirect, the env's proxy."""
    url = request.full_url
    answer = http_request(
        request.get_method(),
        url,
        headers=dict(request.header_items()),
        timeout_s=timeout_s,
        max_bytes=PROMETHEUS_MAX_RESPONSE_BYTES,
        proxy=env_proxy(url),
    )
    if not 200 <= answer.status < 300:  # a 3xx too: credentials never leave the server
        headers = http.client.HTTPMessage()
        for k, v in answer.headers.items():
            headers[k] = v
        raise urllib.error.HTTPError(
            url, answer.status, answer.reason, headers, io.BytesIO(answer.body)
        )
    return answer.body


class PrometheusClient:
    """Queries one Prometheus server."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        transport: Transport | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PrometheusError(
                "must be an http:// or https:// URL of a Prometheus server",
                path=redact_url(url) if parts.hostname else "<prometheus url>",
            )
        self.where = redact_url(url)
        self.base = self.where.rstrip("/")
        self._headers = dict(headers or {})
        if parts.username is not None and "Authorization" not in self._headers:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self.timeout_s = timeout_s
        self._transport = transport or _send

    def query_range(
        self, query: str, start_s: float, end_s: float, step_s: float
    ) -> list[RangeSeries]:
        """All series of `query` over [start, end] at `step`, split into allowed chunks."""
        if not (step_s > 0 and math.isfinite(step_s)):
            raise PrometheusError(f"step must be > 0 seconds, got {step_s!r}", path=self.where)
        if not end_s > start_s:
            raise PrometheusError(f"end ({end_s}) must be after start ({start_s})", path=self.where)
        merged: dict[tuple[tuple[str, str], ...], list[RangeSeries]] = {}
        t = start_s
        while t <= end_s:
            chunk_end = min(end_s, t + (_CHUNK_POINTS - 1) * step_s)
            for s in self.query_range_once(query, t, chunk_end, step_s):
                merged.setdefault(tuple(sorted(s.labels.items())), []).append(s)
            t = chunk_end + step_s
        out = []
        for key, parts in merged.items():
            out.append(
                RangeSeries(
                    dict(key),
                    np.concatenate([p.t_s for p in parts]),
                    np.concatenate([p.values for p in parts]),
                )
            )
        return out

    def query_range_once(
        self, query: str, start_s: float, end_s: float, step_s: float
    ) -> list[RangeSeries]:
        """One `query_range` request: the caller keeps it within MAX_POINTS per series."""
        body = self._get(
            "/api/v1/query_range",
            [
                ("query", query),
                ("start", f"{start_s:.3f}"),
                ("end", f"{end_s:.3f}"),
                ("step", f"{step_s:g}"),
            ],
        )
        return parse_matrix(body, where=self.where, query=query)

    def series(self, matchers: Sequence[str], start_s: float, end_s: float) -> list[dict[str, str]]:
        """Label sets of the series matching any of `matchers` between start and end."""
        body = self._get(
            "/api/v1/series",
            [("match[]", m) for m in matchers]
            + [("start", f"{start_s:.3f}"), ("end", f"{end_s:.3f}")],
        )
        data = decode_answer(body, where=self.where)
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise PrometheusError(
                "series answered something other than a list of label sets",
                path=self.where,
                field="data",
            )
        return [{str(k): str(v) for k, v in d.items()} for d in data]

    def _get(self, path: str, params: Sequence[tuple[str, str]]) -> bytes:
        url = self.base + path + "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, headers={"Accept": "application/json", **self._headers})
        try:
            return self._transport(req, self.timeout_s)
        except HttpError as e:
            raise PrometheusError(self._failure(e), path=self.where) from None
        except urllib.error.HTTPError as e:
            raise PrometheusError(self._http_error(e), path=self.where) from None
        except urllib.error.URLError as e:
            raise PrometheusError(f"cannot reach the server: {e.reason}", path=self.where) from None
        except TimeoutError:
            raise PrometheusError(
                f"no answer within {self.timeout_s:g} s", path=self.where
            ) from None
        except OSError as e:
            raise PrometheusError(f"cannot reach the server: {e}", path=self.where) from None
        except http.client.HTTPException as e:  # not HTTP, a broken chunk, a cut body
            raise PrometheusError(
                f"the server's answer is not valid HTTP ({type(e).__name__}: "
                f"{str(e)[:200] or 'no detail'})",
                path=self.where,
            ) from None

    def _failure(self, e: HttpError) -> str:
        if e.reason == "too_large":
            return (
                f"the answer is larger than {PROMETHEUS_MAX_RESPONSE_BYTES} bytes: ask for a "
                f"shorter range, a coarser --step or fewer series (see {LIMITS_DOC})"
            )
        if e.reason == "timeout":
            return f"no complete answer within {self.timeout_s:g} s"
        if e.reason in ("protocol", "incomplete"):
            return f"the server's answer is not valid HTTP ({e.cause or e.reason}: {e})"
        return f"cannot reach the server: {e}"

    def _http_error(self, e: urllib.error.HTTPError) -> str:
        if e.code in (401, 403):
            return f"HTTP {e.code}: not authorised (check the authorization header or token)"
        if 300 <= e.code < 400:
            location = urllib.parse.urljoin(self.base + "/", e.headers.get("Location", ""))
            return (
                f"HTTP {e.code}: a redirect (to {redact_url(location)}), not followed so "
                "that credentials go nowhere else: give the URL it points to"
            )
        detail = ""
        try:
            doc = BOUNDED_JSON.decode(e.read(_ERROR_BODY_BYTES).decode("utf-8"))
            if isinstance(doc, dict) and doc.get("error"):
                detail = f": {str(doc['error'])[:500]}"
        except (OSError, ValueError, RecursionError):
            pass
        return f"HTTP {e.code} {e.reason}{detail}"
