"""Run the real `bubblewatch run` process for integration tests: start, scrape, signal, reap.

Every daemon started here is killed when its context exits, whatever happens.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

RULE_TEMPLATE = """version: 1
groups:
  - name: test
    rules:
{rules}
"""


def rule_file(path: Path, names: list[str]) -> Path:
    """A rule file whose rules always fire (one alert each)."""
    body = "".join(
        f'      - name: {n}\n        expr: "true"\n        severity: warning\n'
        f"        summary: rule {n} fires\n"
        for n in names
    )
    path.write_text(RULE_TEMPLATE.format(rules=body))
    return path


def write_config(path: Path, **sections: Any) -> Path:
    """A small, fast daemon config: 200 ms sampling, 1 s analysis, 10.5 s window."""
    cfg: dict[str, Any] = {
        "web": {"listen_address": "127.0.0.1:0"},
        "sampling": {"interval": "200ms", "history": "30s"},
        "analysis": {"interval": "1s", "window": "10500ms"},
        "topology": {"rediscover_interval": "5s"},
        "alerting": {"state_dir": str(path.parent / "state"), "instance": "testhost"},
        "log": {"level": "info"},
        "simulate": "pp8-serialized",
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


class Daemon:
    """A running daemon process; its stderr goes to `log_path`."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path
        self._port: int | None = None

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def lines(self, msg: str) -> list[dict[str, str]]:
        """Parsed logfmt lines whose msg is `msg`."""
        out = []
        for line in self.log.splitlines():
            fields = dict(
                (k, v.strip('"')) for k, v in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line)
            )
            if fields.get("msg") == msg:
                out.append(fields)
        return out

    @property
    def port(self) -> int:
        if self._port is None:
            found = wait_for(
                lambda: self._check_alive() or (self.lines("serving metrics") or [None])[0],
                timeout_s=30,
                what="the daemon to serve metrics",
            )
            self._port = int(found["address"].rsplit(":", 1)[1])
        return self._port

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log}")

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()

    def metrics(self) -> dict[str, float]:
        """`name{labels}` -> value, with labels in the exporter's order."""
        status, body = self.get("/metrics")
        assert status == 200, body
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 10.0) -> tuple[int, float]:
        """SIGTERM; returns the exit status and how long the exit took."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout_s)
        return rc, time.monotonic() - t0


def metric(m: Mapping[str, float], name: str, **labels: str) -> float | None:
    """The value of the series `name` whose labels include `labels` (None if absent)."""
    for key, value in m.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(have.get(k) == v for k, v in labels.items()):
            return value
    return None


@contextmanager
def running(
    config: Path, *args: str, env: Mapping[str, str] | None = None, log_name: str = "daemon.log"
) -> Iterator[Daemon]:
    """Start `bubblewatch run --config CONFIG ARGS`; always kill it afterwards."""
    log_path = config.parent / log_name
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
    }
    full_env.update(env or {})
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bubblewatch", "run", "--config", str(config), *args],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=full_env,
            cwd=config.parent,
        )
    d = Daemon(proc, log_path)
    try:
        yield d
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def wait_for(fn: Callable[[], T | None], *, timeout_s: float, what: str, every_s: float = 0.2) -> T:
    """Poll `fn` until it returns something truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})")
