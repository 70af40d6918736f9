"""The receivers' transport over TLS: a private CA delivers, an unknown certificate does not."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from daemon.test_http import make_cert  # tests/ is on the pytest path

from bubblewatch.sinks.alerts import Alert, DeliveryError, ReceiverConfig, build_receiver
from bubblewatch.sinks.alerts.transport import HttpTransport


@contextmanager
def tls_receiver(cert: Path, key: Path) -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(202)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/hook", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_https_with_a_private_ca_and_with_an_unknown_certificate(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    alert = Alert(labels={"alertname": "R", "pipeline": "p"}, starts_at_s=1000.0)
    with tls_receiver(cert, key) as (url, bodies):
        request = build_receiver(ReceiverConfig("hook", "webhook", url)).build_request([alert], 1.0)
        trusted = ssl.create_default_context(cafile=str(cert))
        assert HttpTransport(trusted).send(request, 5.0) == 202
        with pytest.raises(DeliveryError) as e:
            HttpTransport().send(request, 5.0)  # the system's CAs do not know it
    assert len(bodies) == 1 and b'"alertname":"R"' in bodies[0].replace(b" ", b"")
    assert e.value.reason == "connection" and "SSL" in str(e.value)
