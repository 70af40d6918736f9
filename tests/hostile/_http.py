"""Loopback HTTP helpers for the hostile tests: a recording endpoint that can answer anything."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Hit:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Endpoint:
    """Records every request; answers `status` with `headers` (e.g. a Location)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def all_hits(self) -> list[Hit]:
        with self.lock:
            return list(self.hits)

    def wait_hits(self, n: int, timeout_s: float = 10.0) -> list[Hit]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.all_hits()
            if len(got) >= n:
                return got
            time.sleep(0.01)
        raise AssertionError(f"endpoint got {len(self.all_hits())} requests, wanted {n}")


@contextmanager
def endpoint(status: int = 200, headers: dict[str, str] | None = None) -> Iterator[Endpoint]:
    """An Endpoint served on 127.0.0.1 (any port) for the block's duration."""
    ep = Endpoint(status, dict(headers or {}))

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            with ep.lock:
                ep.hits.append(Hit(self.command, self.path, dict(self.headers), body))
                status, extra = ep.status, dict(ep.headers)
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PUT = do_HEAD = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ep.port = int(server.server_address[1])
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield ep
    finally:
        server.shutdown()
        server.server_close()


def raw_get(port: int, path: str = "/metrics", *, timeout_s: float = 5.0) -> tuple[int, float]:
    """One request on a new connection: (status, seconds from connect to the last byte)."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    return int(data.split(b" ", 2)[1]), time.perf_counter() - t0


def slow_clients(port: int, n: int) -> list[socket.socket]:
    """`n` connections that send half a request head and then nothing."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        out.append(s)
    return out


_HOLD_SLOW_CLIENTS = """
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n")
    except OSError:  # already closed by the server to make room
        pass
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def slow_clients_elsewhere(port: int, n: int) -> Iterator[None]:
    """`slow_clients` held by another process, as an attacker's would be, for the block.

    Opened in this process they would compete with the measuring threads for
    its GIL, and a starved scrape looked slow for reasons of the test's own.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SLOW_CLIENTS, str(port), str(n)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"the slow clients' process said {line!r}"
        yield
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


HEALTHY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass
class RawPeer:
    """A loopback TCP peer that reads each request and writes `answer` verbatim, then closes.

    `trickle_s` > 0 writes the answer one byte per `trickle_s` instead. Requests
    are recorded (raw bytes) so a test can see what arrived.
    """

    answer: bytes
    trickle_s: float = 0.0
    requests: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def all_requests(self) -> list[bytes]:
        with self.lock:
            return list(self.requests)


def _read_request(conn: socket.socket) -> bytes:
    """The request head and its Content-Length body (bounded: 1 MiB, 5 s)."""
    conn.settimeout(5.0)
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 1 << 20:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = min(int(value.strip() or 0), 1 << 20)
    while len(body) < length:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@contextmanager
def raw_peer(answer: bytes, *, trickle_s: float = 0.0) -> Iterator[RawPeer]:
    """A RawPeer on 127.0.0.1 (any port) for the block; one thread per connection."""
    peer = RawPeer(answer, trickle_s)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    peer.port = int(srv.getsockname()[1])
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_request(conn)
                with peer.lock:
                    peer.requests.append(request)
                    answer, trickle_s = peer.answer, peer.trickle_s
                if trickle_s <= 0:
                    conn.sendall(answer)
                    return
                for i in range(len(answer)):
                    if stop.wait(trickle_s):
                        return
                    conn.sendall(answer[i : i + 1])
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield peer
    finally:
        stop.set()
        t.join(5)
        srv.close()


class HangingReceiver:
    """Accepts each connection, reads what comes and never answers; `asked` once a request has."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"
        self.asked = threading.Event()
        self.closed_by_peer = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # closed
            while True:
                conn, _ = self._sock.accept()
                self._held.append(conn)
                threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(65536):
                self.asked.set()
            self.closed_by_peer.set()  # the client hung up: the abort reached the wire

    def close(self) -> None:
        # shutdown() wakes the threads blocked in accept() and recv(); close() alone does not,
        # and an accept() left blocked took a connection in a later test and leaked it.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5.0)
        for conn in self._held:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
