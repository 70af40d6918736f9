"""A stand-in SGLang server for live-path tests: real HTTP metrics on 127.0.0.1, a fake /proc.

`EngineServer` serves SGLang's Prometheus text (`--enable-metrics`) with the
running and queued requests a test sets; `write_proc` lays out the fake
`/proc/PID/{cmdline,environ,status}` of its launcher, so discovery finds the
engine's `--port` and polls the server. With a `SglangState` it also serves
the live-settings endpoints as the released SGLang wheels do (`/server_info`,
`/get_server_info`, `POST /set_internal_state`, `--api-key`).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _release(version: str) -> tuple[tuple[int, ...], int]:
    """'0.5.3.post1' -> ((0, 5, 3), 1): enough order for the releases the tests name."""
    base, _, post = version.partition(".post")
    return tuple(int(x) for x in base.split(".")), int(post) if post else 0


def release_at_least(version: str, than: str) -> bool:
    return _release(version) >= _release(than)


class SglangState:
    """The scheduler's live arguments and its `/set_internal_state`, as SGLang `version` has them.

    Read from the released wheels: the cap is `max_micro_batch_size` up to 0.5.3 and
    `pp_max_micro_batch_size` from 0.5.3.post1, default max(max_running // pp, 1); the
    scheduler refuses another key or a cap outside [1, max_running // pp]; the answer
    is one boolean per scheduler, `true` whatever happened up to 0.5.14, the verdict
    from 0.5.15. The top level of `/server_info` is the start-up arguments (the API key
    among them); `internal_states` the live ones (`effective_max_running_requests_per_dp`
    from 0.5.14).
    """

    def __init__(
        self,
        version: str,
        *,
        pp_size: int,
        max_running: int,
        cap: int | None = None,
        depth: int = 0,
        api_key: str | None = None,
    ) -> None:
        self.version, self.pp_size, self.max_running = version, pp_size, max_running
        self.cap_key = (
            "pp_max_micro_batch_size" if _release(version) >= ((0, 5, 3), 1)
            else "max_micro_batch_size"
        )  # fmt: skip
        self.startup_cap = cap
        self.cap = cap if cap is not None else max(max_running // pp_size, 1)
        self.depth, self.api_key = depth, api_key
        self.sets: list[dict[str, Any]] = []

    @property
    def paths(self) -> tuple[str, ...]:
        new = _release(self.version) >= ((0, 5, 6), 0)
        return ("/server_info", "/get_server_info") if new else ("/get_server_info",)

    def server_info(self) -> dict[str, Any]:
        startup: dict[str, Any] = {
            self.cap_key: self.startup_cap, "max_running_requests": None,
            "pp_size": self.pp_size, "api_key": self.api_key, "model_path": "org/model",
        }  # fmt: skip
        live: dict[str, Any] = {self.cap_key: self.cap, "last_gen_throughput": 12.5}
        if _release(self.version) >= ((0, 5, 7), 0):
            startup["pp_async_batch_depth"] = self.depth
        if _release(self.version) >= ((0, 5, 14), 0):
            live |= {**startup, self.cap_key: self.cap}
            live["effective_max_running_requests_per_dp"] = self.max_running
        return {**startup, "internal_states": [live], "version": self.version}

    def set(self, server_args: Mapping[str, Any]) -> list[bool]:
        self.sets.append(dict(server_args))
        upper = self.max_running // self.pp_size
        ok = all(k == self.cap_key and isinstance(v, int) and 1 <= v <= upper
                 for k, v in server_args.items())  # fmt: skip
        if ok:
            self.cap = int(server_args[self.cap_key])
        return [ok if _release(self.version) >= ((0, 5, 15), 0) else True]


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

    def __init__(
        self,
        running: float,
        queued: float,
        *,
        delay_s: float = 0.0,
        state: SglangState | None = None,
        redirect_to: str | None = None,
    ) -> None:
        self.running, self.queued = running, queued
        self.delay_s = delay_s
        self.state = state
        self.redirect_to = redirect_to  # answer every state path with a redirect there
        self.scrapes = 0
        self.requests: list[tuple[str, str | None]] = []  # (path, Authorization header)
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _json(self, code: int, obj: object) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _state(self) -> SglangState | None:
                """The state when this request may see it; None when answered already."""
                owner.requests.append((self.path, self.headers.get("Authorization")))
                st = owner.state
                if owner.delay_s and st is not None:
                    time.sleep(owner.delay_s)  # a stalled engine
                if owner.redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", owner.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                if st is None or (self.command == "GET" and self.path not in st.paths):
                    self.send_error(404)
                    return None
                if st.api_key and self.headers.get("Authorization") != f"Bearer {st.api_key}":
                    self._json(401, {"error": "Unauthorized"})
                    return None
                return st

            def do_POST(self) -> None:
                if self.path != "/set_internal_state" or (st := self._state()) is None:
                    if self.path != "/set_internal_state":
                        self.send_error(404)
                    return
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                self._json(200, st.set(body.get("server_args", {})))

            def do_GET(self) -> None:
                if self.path != "/metrics":
                    if (st := self._state()) is not None:
                        self._json(200, st.server_info())
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


# A launcher that only waits: discovery reads its command line, the test serves its port.
STUB_LAUNCHER = "import time\nwhile True:\n    time.sleep(1)\n"


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
