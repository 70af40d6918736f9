"""The endpoint's connections: one selector thread reads and writes, a bounded pool answers.

Why not a thread per connection (socketserver): 1500 slow clients made 1506
threads and +37 MB before authentication, and with few file descriptors the
accept loop spun. Here one thread owns every socket, non-blocking: it
accepts (backlog `BACKLOG`), runs TLS handshakes, reads request heads under
a deadline (`header_timeout_s` from the first byte, `idle_timeout_s` between
keep-alive requests) and writes responses under a deadline. Only a complete
request goes to a worker, at most `max_requests` at once; one more gets a
fast 503. At `max_connections` open connections a new one replaces the one
that has waited longest without a complete request, so slow clients cannot
lock a scrape out; running out of file descriptors does the same, or pauses
accepting briefly, never spins. Every refusal is counted by reason
(`refusals`, exported by `httpstats`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from http import HTTPStatus

from bubblewatch.daemon.http.message import BadRequest, Request, Response, head_end, parse_request
from bubblewatch.daemon.http.refusals import Refusal, RefusalCounts

log = logging.getLogger("bubblewatch.http")

BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
_RECV_BYTES = 65536
_SWEEP_S = 0.25  # how often deadlines are checked
_PAUSE_S = 0.1  # accepting paused this long when out of file descriptors
_FD_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

Handler = Callable[[Request, str], Response]


class _State(Enum):
    HANDSHAKE = "handshake"
    READ = "read"
    BUSY = "busy"  # a worker is answering
    WRITE = "write"


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    client: str
    state: _State
    deadline_s: float
    waiting_since_s: float  # since when it has waited without a complete request
    inbuf: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None
    close_after: bool = False
    closed: bool = False
    peer_done: bool = False  # the client shut its side after its request (a half-close)
    idle: bool = False  # kept alive after a response, no byte of the next request yet


@dataclass(frozen=True)
class Limits:
    max_requests: int = 40
    max_connections: int = 1024
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    write_timeout_s: float = 10.0


class ConnectionLoop:
    """Serves `listener` until `stop()`; `handle(request, client)` runs on a worker thread."""

    def __init__(
        self,
        listener: socket.socket,
        handle: Handler,
        *,
        tls: Callable[[], ssl.SSLContext | None],
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listener = listener
        self._handle = handle
        self._tls = tls
        self.limits = limits
        self._clock = clock
        self._sel = selectors.DefaultSelector()
        self._conns: set[_Conn] = set()
        self._pool = ThreadPoolExecutor(limits.max_requests, "bubblewatch-http-worker")
        self._in_flight = 0
        self._done: queue.SimpleQueue[tuple[_Conn, Request, Response]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._paused_until_s: float | None = None
        self.refusals = RefusalCounts()

    # -- control ---------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        self._nudge()

    def _nudge(self) -> None:
        with contextlib.suppress(OSError):  # already nudged (buffer full), or closing
            self._wake_w.send(b"\0")

    def run(self) -> None:
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        next_sweep = self._clock() + _SWEEP_S
        try:
            while not self._stop.is_set():
                for key, mask in self._sel.select(_SWEEP_S):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        self._ready(key.data, mask)
                self._finish_done()
                now = self._clock()
                if now >= next_sweep:
                    next_sweep = now + _SWEEP_S
                    self._sweep(now)
        finally:
            self.release()

    def release(self) -> None:
        """Close the connections, selector, workers and wake-up pair: at the end of `run`,
        or instead of it for a loop that never ran."""
        for c in list(self._conns):
            self._close(c)
        self._sel.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._wake_r.close()
        self._wake_w.close()

    # -- accepting ---------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):  # then let the others have a turn
            try:
                sock, addr = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in _FD_ERRORS:
                    # Out of descriptors: free one (the longest waiting) or stop
                    # polling the listener briefly; never spin on a ready listener.
                    if not self._evict_one(Refusal.FILE_DESCRIPTORS):
                        self._pause()
                    log.warning(
                        "cannot accept a connection",
                        extra={"kv": {"error": e.strerror or str(e)},
                               "ratelimit_key": "http-accept"},
                    )  # fmt: skip
                return
            at_cap = len(self._conns) >= self.limits.max_connections
            if at_cap and not self._evict_one(Refusal.CONNECTIONS):
                self.refusals.add(Refusal.CONNECTIONS)
                sock.close()  # every connection is being answered: no room
                continue
            self._open(sock, str(addr[0]))

    def _pause(self) -> None:
        self._sel.unregister(self._listener)
        self._paused_until_s = self._clock() + _PAUSE_S

    def _open(self, sock: socket.socket, client: str) -> None:
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # responses go in one write; no Nagle wait
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        now = self._clock()
        ctx = self._tls()
        state = _State.READ
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (ssl.SSLError, OSError):
                sock.close()
                return
            state = _State.HANDSHAKE
        conn = _Conn(sock, client, state, now + self.limits.header_timeout_s, now)
        self._conns.add(conn)
        self._sel.register(sock, selectors.EVENT_READ, conn)
        if state is _State.HANDSHAKE:
            self._handshake(conn)

    def _evict_one(self, reason: Refusal) -> bool:
        """Close the connection that has waited longest without a complete request."""
        waiting = [c for c in self._conns if c.state in (_State.READ, _State.HANDSHAKE)]
        if not waiting:
            return False
        evicted = self.refusals.add(reason)  # counted before the client can see it
        self._close(min(waiting, key=lambda c: c.waiting_since_s))
        why = ("connection limit reached" if reason is Refusal.CONNECTIONS
               else "out of file descriptors")  # fmt: skip
        log.warning(
            f"{why}; closed the connection waiting longest for a request",
            extra={"kv": {"limit": self.limits.max_connections, "evicted": evicted},
                   "ratelimit_key": f"http-evict:{reason.value}"},
        )  # fmt: skip
        return True

    # -- reading -------------------------------------------------------------------

    def _ready(self, conn: _Conn, mask: int) -> None:
        if conn.state is _State.HANDSHAKE:
            self._handshake(conn)
        elif conn.state is _State.READ:
            self._read(conn)
        elif conn.state is _State.WRITE:
            self._write(conn)

    def _handshake(self, conn: _Conn) -> None:
        assert isinstance(conn.sock, ssl.SSLSocket)
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        except (ssl.SSLError, OSError) as e:
            kv = {"client": conn.client, "error": type(e).__name__}
            log.debug("TLS handshake failed", extra={"kv": kv})
            self._close(conn)
            return
        conn.state = _State.READ
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)  # the handshake may have brought request bytes along

    def _read(self, conn: _Conn) -> None:
        while True:
            try:
                data = conn.sock.recv(_RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError):
                break
            except ssl.SSLWantWriteError:
                self._watch(conn, selectors.EVENT_WRITE)
                break
            except OSError:
                self._close(conn)
                return
            if not data:
                if not self._complete(conn):
                    self._close(conn)
                    return
                conn.peer_done = True  # answer the request it sent, then close
                break
            if not conn.inbuf:  # the first byte of a request starts its header deadline
                conn.deadline_s = self._clock() + self.limits.header_timeout_s
                conn.idle = False
            conn.inbuf += data
            if b"\r\n\r\n" in data or len(conn.inbuf) > 2 * _RECV_BYTES:
                break
        self._dispatch(conn)

    @staticmethod
    def _complete(conn: _Conn) -> bool:
        try:
            return head_end(conn.inbuf) > 0
        except BadRequest:
            return False

    def _dispatch(self, conn: _Conn) -> None:
        """Hand a complete request to a worker, or answer at once (errors, overload)."""
        try:
            n = head_end(conn.inbuf)
            if n < 0:
                return
            head = bytes(conn.inbuf[:n])
            del conn.inbuf[:n]
            request = parse_request(head)
        except BadRequest as e:
            self.refusals.add(Refusal.BAD_REQUEST)
            self._respond(conn, e.response.encode(head=False, keep_alive=False), close=True)
            return
        if self._in_flight >= self.limits.max_requests:
            rejected = self.refusals.add(Refusal.MAX_REQUESTS)
            log.warning(
                "too many concurrent requests; answered 503",
                extra={"kv": {"max_requests": self.limits.max_requests, "rejected": rejected},
                       "ratelimit_key": "http-busy"},
            )  # fmt: skip
            busy = Response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                b"Too many concurrent requests; try again.\n",
                {"Retry-After": "1"},
                close=True,
            )
            self._respond(conn, busy.encode(head=request.method == "HEAD", keep_alive=False),
                          close=True)  # fmt: skip
            return
        conn.state = _State.BUSY
        self._sel.unregister(conn.sock)
        self._in_flight += 1
        self._pool.submit(self._work, conn, request)

    def _work(self, conn: _Conn, request: Request) -> None:
        try:
            response = self._handle(request, conn.client)
        except Exception as e:  # a failing collector must not take the endpoint down
            log.error("request failed", exc_info=True,
                      extra={"kv": {"path": request.path, "error": type(e).__name__},
                             "ratelimit_key": f"http-error:{type(e).__name__}"})  # fmt: skip
            response = Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"Internal error\n", close=True)
        self._done.put((conn, request, response))
        self._nudge()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _finish_done(self) -> None:
        while True:
            try:
                conn, request, response = self._done.get_nowait()
            except queue.Empty:
                return
            self._in_flight -= 1
            if conn.closed:
                continue
            keep = request.keep_alive and not response.close and not conn.peer_done
            data = response.encode(head=request.method == "HEAD", keep_alive=keep)
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            self._respond(conn, data, close=not keep)

    # -- writing ---------------------------------------------------------------------

    def _respond(self, conn: _Conn, data: bytes, *, close: bool) -> None:
        conn.state = _State.WRITE
        conn.out = memoryview(data)
        conn.close_after = close
        conn.deadline_s = self._clock() + self.limits.write_timeout_s
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
            except OSError:
                self._close(conn)
                return
            conn.out = conn.out[sent:]
        conn.out = None
        if conn.close_after:
            self._close(conn)
            return
        now = self._clock()
        conn.state = _State.READ
        conn.waiting_since_s = now
        conn.idle = not conn.inbuf
        conn.deadline_s = now + (
            self.limits.header_timeout_s if conn.inbuf else self.limits.idle_timeout_s
        )
        self._watch(conn, selectors.EVENT_READ)
        if conn.inbuf:
            self._dispatch(conn)  # a pipelined request is already here
        elif isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
            self._read(conn)

    # -- bookkeeping -------------------------------------------------------------------

    def _watch(self, conn: _Conn, events: int) -> None:
        if conn.closed:
            return
        try:
            self._sel.modify(conn.sock, events, conn)
        except KeyError:
            self._sel.register(conn.sock, events, conn)

    def _sweep(self, now: float) -> None:
        for conn in [c for c in self._conns if c.state is not _State.BUSY]:
            if now >= conn.deadline_s:
                kv = {"client": conn.client, "state": conn.state.value}
                log.debug("connection timed out", extra={"kv": kv})
                if not conn.idle:  # an idle kept-alive connection's end is no refusal
                    self.refusals.add(Refusal.DEADLINE)
                self._close(conn)
        if self._paused_until_s is not None and now >= self._paused_until_s:
            self._paused_until_s = None
            self._sel.register(self._listener, selectors.EVENT_READ, None)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        with contextlib.suppress(KeyError, ValueError):  # busy ones are not registered
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()
