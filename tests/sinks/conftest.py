"""Fixtures for sink tests: a scriptable webhook receiver on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class Receiver:
    """Answers each POST per `mode`: 'ok' (200), 'fail' (500), 'reject' (400), 'stall' (sleeps)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.stall_s = 1.0
        self.accepted: list[dict[str, Any]] = []
        self.accepted_raw: list[tuple[dict[str, str], bytes]] = []
        self.attempts = 0
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def bodies(self) -> list[Any]:
        with self.lock:
            return list(self.accepted)

    def wait_for(self, n: int, timeout_s: float = 10.0) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.bodies()
            if len(got) >= n:
                return got
            time.sleep(0.01)
        raise AssertionError(f"receiver got {len(self.bodies())} deliveries, wanted {n}")


@contextmanager
def serve_receiver() -> Iterator[Receiver]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with rec.lock:
                rec.attempts += 1
                rec.paths.append(self.path)
                mode = rec.mode
            if mode == "stall":
                time.sleep(rec.stall_s)
                status = 200  # too late: the client has given up
            elif mode == "fail":
                status = 500
            elif mode == "reject":
                status = 400
            else:
                status = 200
                with rec.lock:
                    rec.accepted.append(json.loads(body))
                    rec.accepted_raw.append((dict(self.headers), body))
            try:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.server = server
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver_server() -> Callable[[], AbstractContextManager[Receiver]]:
    """`with receiver_server() as rec:` starts a scriptable receiver on 127.0.0.1."""
    return serve_receiver
