"""The HTTP endpoint: `/metrics`, `/-/healthy`, `/-/ready`, with optional TLS and basic auth.

A ThreadingHTTPServer: each connection gets its own thread, so a slow client
or a TLS handshake never blocks another scrape; each has a socket timeout.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from bubblewatch.daemon.config import parse_listen_address
from bubblewatch.daemon.webconfig import BasicAuth, WebSettings

log = logging.getLogger("bubblewatch.http")

_LANDING = """<!doctype html>
<html><head><title>bubblewatch</title></head><body>
<h1>bubblewatch</h1><p>Pipeline-bubble telemetry for LLM inference servers.</p>
<ul><li><a href="{path}">Metrics</a></li><li><a href="/-/healthy">Health</a></li>
<li><a href="/-/ready">Readiness</a></li></ul></body></html>
"""


class MetricsServer:
    """Serves `registry` on `listen_address`; `ready()` decides /-/ready's answer."""

    def __init__(
        self,
        listen_address: str,
        registry: CollectorRegistry,
        *,
        web: WebSettings | None = None,
        ready: Callable[[], bool] = lambda: True,
        telemetry_path: str = "/metrics",
        request_timeout_s: float = 10.0,
    ) -> None:
        host, port = parse_listen_address(listen_address)
        self.registry = registry
        self.telemetry_path = telemetry_path
        self.request_timeout_s = request_timeout_s
        self._ready = ready
        self._lock = threading.Lock()
        self._web = WebSettings()
        self._auth = BasicAuth({})
        self._ssl: ssl.SSLContext | None = None
        self.set_web(web or WebSettings())
        self._httpd = _Server(self, host, port)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def tls(self) -> bool:
        with self._lock:
            return self._ssl is not None

    def set_web(self, web: WebSettings) -> None:
        """Swap TLS and auth settings (on reload); new connections use them."""
        ctx = web.tls.context() if web.tls is not None else None
        auth = BasicAuth(web.users)
        with self._lock:
            self._web, self._auth, self._ssl = web, auth, ctx

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="bubblewatch-http", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)

    def _settings(self) -> tuple[WebSettings, BasicAuth, ssl.SSLContext | None]:
        with self._lock:
            return self._web, self._auth, self._ssl


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: MetricsServer, host: str, port: int) -> None:
        self.owner = owner
        self._dual_stack = False
        if ":" in host:
            self.address_family = socket.AF_INET6
        elif host == "" and socket.has_ipv6:
            self.address_family = socket.AF_INET6
            self._dual_stack = True
            host = "::"
        try:
            super().__init__((host, port), _Handler)
        except OSError:
            if not self._dual_stack:
                raise
            self.address_family = socket.AF_INET
            self._dual_stack = False
            super().__init__(("0.0.0.0", port), _Handler)

    def server_bind(self) -> None:
        if self._dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that vanished or failed TLS is not our error; no traceback on stderr.
        log.debug("connection failed", extra={"kv": {"client": client_address[0]}})

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        _, _, ctx = self.owner._settings()
        if ctx is not None:
            # The handshake runs later in the handler's thread, never in accept().
            sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "bubblewatch"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(self.server.owner.request_timeout_s)
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS handshake failed", extra={"kv": {"error": type(e).__name__}})
                self.close_connection = True
                raise

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _serve(self, *, head: bool) -> None:
        owner = self.server.owner
        web, auth, _ = owner._settings()
        if web.auth_required and not self._authorized(auth):
            self._reply(HTTPStatus.UNAUTHORIZED, b"Unauthorized\n", web, head,
                        extra={"WWW-Authenticate": 'Basic realm="bubblewatch"'})  # fmt: skip
            return
        path = self.path.split("?", 1)[0]
        if path == owner.telemetry_path:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(owner.registry)
            extra = {}
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body, compresslevel=1)
                extra["Content-Encoding"] = "gzip"
            self._reply(HTTPStatus.OK, body, web, head, content_type=content_type, extra=extra)
        elif path == "/-/healthy":
            self._reply(HTTPStatus.OK, b"Healthy\n", web, head)
        elif path == "/-/ready":
            ok = owner._ready()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._reply(status, b"Ready\n" if ok else b"Not ready\n", web, head)
        elif path == "/":
            page = _LANDING.format(path=owner.telemetry_path).encode()
            self._reply(HTTPStatus.OK, page, web, head, content_type="text/html; charset=utf-8")
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"Not found\n", web, head)

    def _authorized(self, auth: BasicAuth) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return bool(sep) and auth.check(user, password)

    def _reply(
        self,
        status: HTTPStatus,
        body: bytes,
        web: WebSettings,
        head: bool,
        *,
        content_type: str = "text/plain; charset=utf-8",
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in {**web.headers, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Never the Authorization header; only method, path and status at debug.
        log.debug("http request", extra={"kv": {"client": self.client_address[0],
                                                "request": format % args}})  # fmt: skip
