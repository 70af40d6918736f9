"""Real Prometheus and Alertmanager for tests, on loopback, bounded in time, always stopped.

- `prometheus(workdir, config)` and `alertmanager(workdir, config)`: start the
  Debian-packaged binaries on free 127.0.0.1 ports with their storage under
  `workdir`, wait for `/-/ready` (bounded), yield a `Service`, and terminate
  them (kill if need be) however the block ends.
- `webhook_receiver()`: a tiny HTTP server in a thread that records every JSON
  body posted to it, for Alertmanager's webhook_configs.
- `get_json(url)`: GET with a timeout, JSON decoded.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_START_ATTEMPTS = 3  # a free port may be taken between choosing it and binding it


class ServiceError(RuntimeError):
    """A service did not start or become ready; the message carries the tail of its log."""


@dataclass(frozen=True)
class Service:
    name: str
    url: str
    port: int
    log: Path

    def log_tail(self, n_bytes: int = 4000) -> str:
        return _tail(self.log, n_bytes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return json.loads(r.read().decode())


def post_json(url: str, body: Any, timeout_s: float = 5.0) -> int:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return int(r.status)


def wait_until(
    check: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2
) -> None:
    """Polls `check` until it is true; TimeoutError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(interval_s)


@contextlib.contextmanager
def prometheus(
    workdir: Path, config: Mapping[str, Any], *, extra_args: tuple[str, ...] = ()
) -> Iterator[Service]:
    """Prometheus with `config` (a prometheus.yml as a mapping) and its TSDB under `workdir`."""
    if PROMETHEUS is None:
        raise ServiceError("prometheus is not installed (Debian package `prometheus`)")
    conf = workdir / "prometheus.yml"
    conf.write_text(yaml.safe_dump(dict(config), sort_keys=False))

    def argv(port: int) -> list[str]:
        return [
            str(PROMETHEUS),
            f"--config.file={conf}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            *extra_args,
        ]

    with _service("prometheus", workdir, argv) as svc:
        yield svc


@contextlib.contextmanager
def alertmanager(workdir: Path, config: Mapping[str, Any]) -> Iterator[Service]:
    """Alertmanager with `config` (an alertmanager.yml as a mapping), clustering off."""
    if ALERTMANAGER is None:
        raise ServiceError(
            "alertmanager is not installed (Debian package `prometheus-alertmanager`)"
        )
    conf = workdir / "alertmanager.yml"
    conf.write_text(yaml.safe_dump(dict(config), sort_keys=False))

    def argv(port: int) -> list[str]:
        return [
            str(ALERTMANAGER),
            f"--config.file={conf}",
            f"--storage.path={workdir / 'alertmanager-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip port: a single local instance
        ]

    with _service("alertmanager", workdir, argv) as svc:
        yield svc


@contextlib.contextmanager
def _service(name: str, workdir: Path, argv: Callable[[int], list[str]]) -> Iterator[Service]:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    for attempt in range(_START_ATTEMPTS):
        port = free_port()
        with log.open("ab") as out:
            proc = subprocess.Popen(argv(port), stdout=out, stderr=subprocess.STDOUT)
        svc = Service(name, f"http://127.0.0.1:{port}", port, log)
        try:
            ready = _wait_ready(proc, svc)
            if (
                not ready
                and attempt + 1 < _START_ATTEMPTS
                and "address already in use" in (svc.log_tail())
            ):
                continue  # lost the port race; try another
            if not ready:
                raise ServiceError(
                    f"{name} exited with {proc.returncode} before it was ready:\n{svc.log_tail()}"
                )
            yield svc
            return
        finally:
            _stop(proc)
    raise ServiceError(f"{name}: no free port after {_START_ATTEMPTS} attempts")


def _wait_ready(proc: subprocess.Popen[bytes], svc: Service) -> bool:
    """True once /-/ready answers 200; False if the process exits first; raises on timeout."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(svc.url + "/-/ready", timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    raise ServiceError(f"{svc.name} not ready within {READY_TIMEOUT_S:g} s:\n{svc.log_tail()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(path: Path, n_bytes: int) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n_bytes:].decode(errors="replace")


# -- a webhook receiver ---------------------------------------------------------


@dataclass
class WebhookReceiver:
    """Records what is posted to `url`; `wait_for` blocks until a post matches."""

    url: str = ""
    posts: list[tuple[str, Any]] = field(default_factory=list)  # (path, decoded JSON body)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def record(self, path: str, body: Any) -> None:
        with self._cond:
            self.posts.append((path, body))
            self._cond.notify_all()

    def wait_for(self, match: Callable[[str, Any], bool], timeout_s: float) -> tuple[str, Any]:
        """The first post (path, body) for which `match` is true; TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for post in self.posts:
                    if match(*post):
                        return post
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [p for p, _ in self.posts]
                    raise TimeoutError(f"no matching post within {timeout_s:g} s (got {seen})")
                self._cond.wait(left)


@contextlib.contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """A receiver on a free loopback port, serving in a daemon thread; shut down on exit."""
    receiver = WebhookReceiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw.decode() or "null")
            except ValueError:
                body = raw.decode(errors="replace")
            receiver.record(self.path, body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
