"""A webhook endpoint for the daemon's alerts in integration tests: it keeps every alert."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class Inbox:
    """A webhook endpoint that accepts everything and keeps each alert object."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with inbox.lock:
                    inbox.alerts.extend(body["alerts"])
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def got(self, name: str, status: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                a for a in self.alerts if a["labels"]["alertname"] == name and a["status"] == status
            ]


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    box = Inbox()
    thread = threading.Thread(target=box.httpd.serve_forever, daemon=True)
    thread.start()
    yield box
    box.httpd.shutdown()
    box.httpd.server_close()
