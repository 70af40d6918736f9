"""The daemon speaks sd_notify to $NOTIFY_SOCKET: READY, STATUS, WATCHDOG, RELOADING, STOPPING."""

from __future__ import annotations

import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._proc import running, write_config


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    # A short directory: AF_UNIX paths are limited to 108 bytes.
    d = tempfile.mkdtemp(prefix="bwsd", dir="/tmp")
    path = f"{d}/notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    yield sock, path
    sock.close()
    shutil.rmtree(d, ignore_errors=True)


def receive(sock: socket.socket, until_s: float, stop: str | None = None) -> list[dict[str, str]]:
    """Messages until `until_s` (monotonic) or one containing the key `stop`."""
    out: list[dict[str, str]] = []
    while time.monotonic() < until_s:
        try:
            data = sock.recv(4096).decode()
        except TimeoutError:
            continue
        msg = dict(line.split("=", 1) for line in data.splitlines())
        out.append(msg)
        if stop is not None and stop in msg:
            break
    return out


def test_sd_notify_protocol(tmp_path: Path, notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    cfg = write_config(tmp_path / "bubblewatch.yml")
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"}  # pings every 0.25 s
    with running(cfg, env=env) as d:
        start = receive(sock, time.monotonic() + 30, stop="READY")
        assert start and start[-1].get("READY") == "1", start
        status, _ = d.get("/-/healthy")  # READY came with the HTTP server up
        assert status == 200
        msgs = receive(sock, time.monotonic() + 3.0)
        watchdog = [m for m in msgs if m.get("WATCHDOG") == "1"]
        assert len(watchdog) >= 6, msgs  # ~4 per second
        statuses = [m["STATUS"] for m in msgs if "STATUS" in m]
        assert statuses and "testhost/sglang:30000: insufficient_data" in statuses[0]

        d.signal(signal.SIGHUP)
        msgs = receive(sock, time.monotonic() + 10, stop="READY")
        reloading = [m for m in msgs if m.get("RELOADING") == "1"]
        assert reloading and int(reloading[0]["MONOTONIC_USEC"]) > 0
        assert msgs[-1].get("READY") == "1"
        assert msgs.index(reloading[0]) < len(msgs) - 1

        # A reload that changes what needs a restart, then one that is malformed: STATUS says so.
        write_config(cfg, web={"listen_address": "127.0.0.1:1"})
        d.signal(signal.SIGHUP)
        msgs = receive(sock, time.monotonic() + 10, stop="READY")
        assert msgs[-1]["STATUS"].endswith("; restart required for web.listen_address"), msgs
        cfg.write_text("sampling: [not, a, mapping]\n")
        d.signal(signal.SIGHUP)
        msgs = receive(sock, time.monotonic() + 10, stop="READY")
        assert msgs[-1]["STATUS"].endswith("; last reload invalid, previous configuration kept "
                                           "(see the log)"), msgs  # fmt: skip
        assert d.get("/-/healthy")[0] == 200  # still serving where it started

        d.signal(signal.SIGTERM)
        msgs = receive(sock, time.monotonic() + 5, stop="STOPPING")
        assert msgs and msgs[-1].get("STOPPING") == "1", msgs
        assert d.proc.wait(5) == 0


def test_hung_sampler_stops_watchdog_pings(tmp_path: Path) -> None:
    """Watchdog pings come from the sampling thread: when it stops ticking, so do the pings."""
    from bubblewatch.daemon.loop.ticks import Sampler
    from bubblewatch.daemon.ring import RingBuffer
    from bubblewatch.model.samples import Sample

    class Hangs:
        def __init__(self) -> None:
            self.calls = 0
            self.release = False

        def gpus(self):  # type: ignore[no-untyped-def]
            return ()

        def interval_s(self, now_s: float) -> float:
            return 0.02

        def poll(self, now_s: float) -> list[Sample]:
            self.calls += 1
            while self.calls > 3 and not self.release:
                time.sleep(0.01)  # the third tick on hangs, like a wedged driver call
            return []

        def events(self):  # type: ignore[no-untyped-def]
            return []

        def close(self) -> None:
            pass

    pings: list[float] = []
    src = Hangs()
    s = Sampler(
        src,
        [RingBuffer(4)],
        watchdog=lambda: pings.append(time.monotonic()),
        watchdog_interval_s=0.04,
    )
    s.start()
    time.sleep(0.5)
    n = len(pings)
    time.sleep(0.3)
    assert n == 3 and len(pings) == n  # no ping while the poll hangs
    src.release = True
    s.stop()
    assert len(pings) > n
