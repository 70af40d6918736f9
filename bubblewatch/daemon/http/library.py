"""The HTTP endpoint on uvicorn (a maintained ASGI server), measured against our own.

Same routes, auth, negotiation and headers as `http.MetricsServer` (this
class inherits its answering), served by uvicorn's h11 protocol on the same
listening socket. What uvicorn's public configuration offers is used as the
bounds: `limit_concurrency` for the connection cap (uvicorn answers 503 past
it), `timeout_keep_alive` for idle kept-alive connections,
`h11_max_incomplete_event_size` for the request head, `backlog`.
`max_requests` is enforced here, in the ASGI app (a fast 503, counted).
Answers are rendered on a bounded thread pool, never on the event loop (a
bcrypt check takes ~60 ms).

No option of uvicorn's sets a deadline for a request head (a silent or
half-sent one is held until the client goes), a response write, or a TLS
handshake (asyncio's default, 60 s, applies), or makes room at its
connection cap; its 400s for malformed heads are not counted.
BENCHMARKS.md, "HTTP endpoint: our server or uvicorn", has what that
changes under the hostile suite and under load.

`BUBBLEWATCH_HTTP_SERVER=uvicorn` in the daemon's environment selects this
server (`server_class`); the default is our own.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from prometheus_client.registry import CollectorRegistry

from bubblewatch.daemon.config.listen import DEFAULT_MAX_REQUESTS, parse_listen_address
from bubblewatch.daemon.config.web import WebSettings
from bubblewatch.daemon.http.connections import BACKLOG, Limits
from bubblewatch.daemon.http.message import MAX_HEAD_BYTES, Request, Response
from bubblewatch.daemon.http.refusals import Refusal, RefusalCollector, RefusalCounts
from bubblewatch.daemon.http.server import MetricsServer, _listen, connection_cap

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

log = logging.getLogger("bubblewatch.http")

SERVER_ENV = "BUBBLEWATCH_HTTP_SERVER"
SERVERS = ("builtin", "uvicorn")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def server_class(env: Mapping[str, str]) -> type[MetricsServer]:
    """The endpoint `BUBBLEWATCH_HTTP_SERVER` names (default: our own); ValueError if unknown."""
    name = env.get(SERVER_ENV, "builtin") or "builtin"
    if name not in SERVERS:
        raise ValueError(f"must be one of {', '.join(SERVERS)}, got {name!r}")
    return UvicornMetricsServer if name == "uvicorn" else MetricsServer


def _request(scope: Scope) -> Request:
    headers = http.client.HTTPMessage()
    for name, value in scope["headers"]:
        headers[name.decode("latin-1")] = value.decode("latin-1")
    return Request(scope["method"], scope["path"], f"HTTP/{scope['http_version']}", headers)


class UvicornMetricsServer(MetricsServer):
    """`MetricsServer`'s interface and answers, served by uvicorn on a thread of its own."""

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
        # Only when selected: the default endpoint loads neither (asyncio alone is 33 modules).
        import asyncio

        import uvicorn

        self._running_loop: Callable[[], AbstractEventLoop] = asyncio.get_running_loop

        if max_requests < 1:
            raise ValueError(f"max_requests must be >= 1, got {max_requests}")
        host, port = parse_listen_address(listen_address)
        self.registry = registry
        self.telemetry_path = telemetry_path
        self._ready = ready
        self._lock = threading.Lock()
        self.set_web(web or WebSettings())
        self._tls_at_start = self._ssl is not None
        # Re-opened from its descriptor so that `proto` reads IPPROTO_TCP, not 0: asyncio
        # sets TCP_NODELAY only on such sockets, and without it every kept-alive answer
        # waited 40 ms for the client's delayed ACK (uvicorn writes head and body apart).
        self._sock = socket.socket(fileno=_listen(host, port).detach())
        self._limits = Limits(
            max_requests=max_requests,
            max_connections=max_connections or connection_cap(),
            header_timeout_s=request_timeout_s,
            write_timeout_s=request_timeout_s,
        )
        self._refusals = RefusalCounts()
        registry.register(RefusalCollector(self._refusals))
        self._pool = ThreadPoolExecutor(max_requests, "bubblewatch-http-worker")
        self._in_flight = 0  # touched only on the event loop
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            interface="asgi3",
            proxy_headers=False,
            log_config=None,
            access_log=False,
            server_header=False,
            backlog=BACKLOG,
            limit_concurrency=self._limits.max_connections,
            timeout_keep_alive=int(self._limits.idle_timeout_s),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            http="h11",
            ssl_context_factory=self._ssl_context if self._tls_at_start else None,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def limits(self) -> Limits:
        return self._limits

    def set_web(self, web: WebSettings) -> None:
        """Swap TLS and auth settings; a TLS context swaps per handshake (SNI callback)."""
        super().set_web(web)
        at_start = getattr(self, "_tls_at_start", None)
        if at_start is not None and at_start != (web.tls is not None):
            log.warning(
                "TLS turned on or off by a reload: uvicorn keeps the setting it started "
                "with until the daemon restarts",
                extra={"kv": {"tls": at_start}},
            )

    def _ssl_context(self, config: object, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """The context uvicorn listens with: each handshake switches to the current one."""
        first = self._tls()
        assert first is not None

        def switch(sslobj: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
            current = self._tls()
            if current is not None and current is not ctx:
                sslobj.context = current

        first.sni_callback = switch
        return first

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]},
            name="bubblewatch-http", daemon=True,
        )  # fmt: skip
        self._thread.start()

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    # -- the ASGI app (on uvicorn's event loop) ----------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = _request(scope)
        if self._in_flight >= self._limits.max_requests:
            self._refusals.add(Refusal.MAX_REQUESTS)
            log.warning(
                "too many concurrent requests; answered 503",
                extra={"kv": {"max_requests": self._limits.max_requests},
                       "ratelimit_key": "http-busy"},
            )  # fmt: skip
            busy = Response(HTTPStatus.SERVICE_UNAVAILABLE,
                            b"Too many concurrent requests; try again.\n",
                            {"Retry-After": "1"}, close=True)  # fmt: skip
            await _send(send, busy)
            return
        self._in_flight += 1
        client = scope["client"][0] if scope.get("client") else ""
        try:
            loop = self._running_loop()
            response = await loop.run_in_executor(self._pool, self._answer_safely, request, client)
        finally:
            self._in_flight -= 1
        await _send(send, response)

    def _answer_safely(self, request: Request, client: str) -> Response:
        try:
            return self._answer(request, client)
        except Exception as e:  # a failing collector must not take the endpoint down
            log.error("request failed", exc_info=True,
                      extra={"kv": {"path": request.path, "error": type(e).__name__},
                             "ratelimit_key": f"http-error:{type(e).__name__}"})  # fmt: skip
            return Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"Internal error\n", close=True)


async def _send(send: Send, response: Response) -> None:
    headers = {"Content-Type": "text/plain; charset=utf-8", **response.headers,
               "Content-Length": str(len(response.body))}  # fmt: skip
    if response.close:
        headers["Connection"] = "close"
    await send({
        "type": "http.response.start",
        "status": response.status.value,
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": response.body})
