"""A stand-in SGLang server for live-path tests: real HTTP metrics on 127.0.0.1, a fake /proc.

`EngineServer` serves SGLang's Prometheus text (`--enable-metrics`) with the
running and queued requests a test sets; `write_proc` lays out the fake
`/proc/PID/{cmdline,environ,status}` of its launcher, so discovery finds the
engine's `--port` and polls the server.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m",pp_rank="0",tp_rank="0"}} {running}
sglang:num_running_reqs{{model_name="m",pp_rank="1",tp_rank="0"}} {running}
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="m",pp_rank="0",tp_rank="0"}} {queued}
"""


class EngineServer:
    """SGLang-style /metrics with settable load; counts the scrapes it answered."""

    def __init__(self, running: float, queued: float, *, delay_s: float = 0.0) -> None:
        self.running, self.queued = running, queued
        self.delay_s = delay_s
        self.scrapes = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                owner.scrapes += 1
                if owner.delay_s:
                    time.sleep(owner.delay_s)  # a stalled engine
                body = SGLANG_METRICS.format(running=owner.running, queued=owner.queued).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EngineServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def sglang_argv(port: int, pp_size: int, *extra: str) -> list[str]:
    return [
        "/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "org/model",
        "--pp-size", str(pp_size), "--host", "0.0.0.0", "--port", str(port), "--enable-metrics",
        "--api-key", "sk-LIVEtestkey0123456789abcdefXYZ", *extra,
    ]  # fmt: skip


def write_proc(
    root: Path, pid: int, argv: Sequence[str], env: Mapping[str, str] | None = None, ppid: int = 1
) -> Path:
    """One process in a fake /proc tree (the files discovery reads)."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(
        b"".join(f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items())
    )
    (d / "status").write_text(f"Name:\tpython3\nPid:\t{pid}\nPPid:\t{ppid}\n")
    return root
