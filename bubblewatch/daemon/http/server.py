"""The HTTP endpoint: `/metrics`, `/-/healthy`, `/-/ready`, with optional TLS and basic auth.

Connections are handled by `httploop.ConnectionLoop` (one selector thread,
bounded workers, deadlines, a connection cap; see there for why), messages
by `httpmsg`. This module binds the socket and answers requests: routing,
basic auth, content negotiation (OpenMetrics by `Accept`, gzip by
`Accept-Encoding` with q-values, `Vary` on both). No `Server` header: the
endpoint does not advertise its software or Python's version. What the
endpoint refuses (503s, closed connections) it counts on its own registry:
`bubblewatch_http_requests_rejected_total{reason}` (`httpstats`).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import logging
import resource
import socket
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from bubblewatch.daemon.config.listen import DEFAULT_MAX_REQUESTS, parse_listen_address
from bubblewatch.daemon.config.web import BasicAuth, WebSettings
from bubblewatch.daemon.http.connections import BACKLOG, ConnectionLoop, Limits
from bubblewatch.daemon.http.message import Request, Response, accepts_gzip
from bubblewatch.daemon.http.refusals import RefusalCollector

log = logging.getLogger("bubblewatch.http")

MAX_CONNECTIONS = 2048
_FD_RESERVE = 64  # descriptors kept for everything but connections (queues, NVML, /proc)

_LANDING = """<!doctype html>
<html><head><title>bubblewatch</title></head><body>
<h1>bubblewatch</h1><p>Pipeline-bubble telemetry for LLM inference servers.</p>
<ul><li><a href="{path}">Metrics</a></li><li><a href="/-/healthy">Health</a></li>
<li><a href="/-/ready">Readiness</a></li></ul></body></html>
"""


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """`limit`, or fewer when the open-file limit would not allow that many (16 at least)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(16, min(limit, soft - _FD_RESERVE))


class MetricsServer:
    """Serves `registry` on `listen_address`; `ready()` decides /-/ready's answer.

    The server adds its own refusal counters to `registry`.
    """

    def __init__(
        self,
        listen_address: str,
        registry: CollectorRegistry,
        *,
        web: WebSettings | None = None,
        ready: Callable[[], bool] = lambda: True,
        telemetry_path: str = "/metrics",
        request_timeout_s: float = 10.0,
        max_requests: int = DEFAULT_MAX_REQUESTS,
        max_connections: int | None = None,
    ) -> None:
        if max_requests < 1:
            raise ValueError(f"max_requests must be >= 1, got {max_requests}")
        host, port = parse_listen_address(listen_address)
        self.registry = registry
        self.telemetry_path = telemetry_path
        self._ready = ready
        self._lock = threading.Lock()
        self._web = WebSettings()
        self._auth = BasicAuth({})
        self._ssl: ssl.SSLContext | None = None
        self.set_web(web or WebSettings())
        self._sock = _listen(host, port)
        limits = Limits(
            max_requests=max_requests,
            max_connections=max_connections or connection_cap(),
            header_timeout_s=request_timeout_s,
            write_timeout_s=request_timeout_s,
        )
        self._loop = ConnectionLoop(self._sock, self._answer, tls=self._tls, limits=limits)
        registry.register(RefusalCollector(self._loop.refusals))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def tls(self) -> bool:
        with self._lock:
            return self._ssl is not None

    @property
    def limits(self) -> Limits:
        return self._loop.limits

    def set_web(self, web: WebSettings) -> None:
        """Swap TLS and auth settings (on reload); new connections use them."""
        ctx = web.tls.context() if web.tls is not None else None
        auth = BasicAuth(web.users)
        with self._lock:
            self._web, self._auth, self._ssl = web, auth, ctx

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop.run, name="bubblewatch-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._loop.stop()
        if self._thread is not None:
            self._thread.join(5.0)
        else:  # never started: nothing ran to release the loop's sockets
            self._loop.release()
        self._sock.close()

    def _settings(self) -> tuple[WebSettings, BasicAuth, ssl.SSLContext | None]:
        with self._lock:
            return self._web, self._auth, self._ssl

    def _tls(self) -> ssl.SSLContext | None:
        return self._settings()[2]

    # -- answering (on a worker thread) ---------------------------------------------

    def _answer(self, req: Request, client: str) -> Response:
        web, auth, _ = self._settings()
        resp = self._route(req, auth, web.auth_required)
        resp.headers.update(web.headers)
        kv = {"client": client, "method": req.method, "path": req.path,
              "status": resp.status.value}  # fmt: skip
        log.debug("http request", extra={"kv": kv})
        return resp

    def _route(self, req: Request, auth: BasicAuth, auth_required: bool) -> Response:
        if req.method not in ("GET", "HEAD"):
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"Method not allowed\n",
                            {"Allow": "GET, HEAD"})  # fmt: skip
        if auth_required and not _authorized(req, auth):
            return Response(HTTPStatus.UNAUTHORIZED, b"Unauthorized\n",
                            {"WWW-Authenticate": 'Basic realm="bubblewatch"'})  # fmt: skip
        if req.path == self.telemetry_path:
            return self._metrics(req)
        if req.path == "/-/healthy":
            return Response(HTTPStatus.OK, b"Healthy\n")
        if req.path == "/-/ready":
            if self._ready():
                return Response(HTTPStatus.OK, b"Ready\n")
            return Response(HTTPStatus.SERVICE_UNAVAILABLE, b"Not ready\n")
        if req.path == "/":
            page = _LANDING.format(path=self.telemetry_path).encode()
            return Response(HTTPStatus.OK, page, {"Content-Type": "text/html; charset=utf-8"})
        return Response(HTTPStatus.NOT_FOUND, b"Not found\n")

    def _metrics(self, req: Request) -> Response:
        encoder, content_type = choose_encoder(req.header("Accept"))
        body = encoder(self.registry)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
        if accepts_gzip(req.header("Accept-Encoding")):
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        return Response(HTTPStatus.OK, body, headers)


def _authorized(req: Request, auth: BasicAuth) -> bool:
    scheme, _, token = req.header("Authorization").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return bool(sep) and auth.check(user, password)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket: IPv6 for `[v6]`, both families for an empty host where possible."""
    if ":" in host:
        candidates = [(socket.AF_INET6, host, False)]
    elif host == "" and socket.has_ipv6:
        candidates = [(socket.AF_INET6, "::", True), (socket.AF_INET, "0.0.0.0", False)]
    else:
        candidates = [(socket.AF_INET, host, False)]
    err: OSError | None = None
    for family, addr, dual in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if dual:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((addr, port))
            sock.listen(BACKLOG)
            return sock
        except OSError as e:
            sock.close()
            err = e
    assert err is not None
    raise err
