"""The real `bubblewatch run` for the stack tests: a fast simulated config, start, reap.

`daemon(workdir, name, **config)` writes a config (fast sampling and analysis,
a simulated scenario, a free loopback port), starts the daemon as its own
process, waits (bounded) until it serves /metrics, yields a `BwDaemon`, and
kills it however the block ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

START_TIMEOUT_S = 30.0
_SERVING = re.compile(r'msg="serving metrics" address=\S*:(\d+)')


@dataclass(frozen=True)
class BwDaemon:
    name: str
    proc: subprocess.Popen[bytes]
    config: Path
    log: Path
    port: int

    @property
    def target(self) -> str:
        """host:port, as a Prometheus static target."""
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.target}/metrics", timeout=5) as r:
            body: bytes = r.read()
            return body.decode()

    def reconfigure(self, **changes: Any) -> None:
        """Rewrite the config with `changes` merged in, then SIGHUP (the daemon's reload)."""
        cfg = yaml.safe_load(self.config.read_text())
        self.config.write_text(yaml.safe_dump(_merge(cfg, changes)))
        self.proc.send_signal(signal.SIGHUP)


def fast_config(workdir: Path, name: str, **changes: Any) -> dict[str, Any]:
    """A daemon config for tests: 200 ms sampling, 1 s analysis over 10.5 s, serialized PP8."""
    base: dict[str, Any] = {
        "web": {"listen_address": "127.0.0.1:0"},
        "sampling": {"interval": "200ms", "history": "60s"},
        "analysis": {"interval": "1s", "window": "10500ms"},
        "topology": {"rediscover_interval": "5s"},
        "alerting": {"state_dir": str(workdir / f"{name}-state"), "instance": name},
        "log": {"level": "info"},
        "simulate": "pp8-serialized",
    }
    return _merge(base, changes)


def _merge(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in changes.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


@contextlib.contextmanager
def daemon(workdir: Path, name: str, **changes: Any) -> Iterator[BwDaemon]:
    """`bubblewatch run` on `fast_config(...)`; killed when the block ends, whatever happens."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / f"{name}.yml"
    config.write_text(yaml.safe_dump(fast_config(workdir, name, **changes)))
    log = workdir / f"{name}.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bubblewatch", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=env,
            cwd=workdir,
        )
    try:
        port = _wait_port(proc, log)
        yield BwDaemon(name, proc, config, log, port)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _wait_port(proc: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        m = _SERVING.search(text)
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"bubblewatch run exited with {proc.returncode}:\n{text[-4000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"bubblewatch run did not serve metrics within {START_TIMEOUT_S:g} s")
