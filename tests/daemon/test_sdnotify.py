"""sd_notify spoken to a test datagram socket, path and abstract namespace."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from bubblewatch.daemon.sdnotify import SdNotifier


@pytest.fixture
def listener(tmp_path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.settimeout(2.0)
    yield sock, path
    sock.close()


def recv(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.split("\n"))


def test_lifecycle_messages_on_path_socket(listener) -> None:
    sock, path = listener
    n = SdNotifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready(status="serialized (0.92) on pp-a")
    assert recv(sock) == {"READY": "1", "STATUS": "serialized (0.92) on pp-a"}
    assert n.watchdog()
    assert recv(sock) == {"WATCHDOG": "1"}
    assert n.status("line one\nline two")
    assert recv(sock) == {"STATUS": "line one line two"}
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert n.reloading()
    msg = recv(sock)
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert msg["RELOADING"] == "1" and before <= int(msg["MONOTONIC_USEC"]) <= after
    assert n.stopping()
    assert recv(sock) == {"STOPPING": "1"}
    n.close()


def test_abstract_namespace_socket() -> None:
    name = f"bubblewatch-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2.0)
    try:
        n = SdNotifier({"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert recv(sock) == {"READY": "1"}
        n.close()
    finally:
        sock.close()


def test_without_socket_everything_is_a_noop() -> None:
    n = SdNotifier({})
    assert not n.enabled
    assert not n.ready() and not n.watchdog() and not n.stopping()
    assert n.watchdog_interval_s is None


def test_missing_socket_is_logged_once_and_never_raises(tmp_path, caplog) -> None:
    n = SdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    with caplog.at_level("WARNING", logger="bubblewatch"):
        assert not n.watchdog()
        assert not n.watchdog()
    n.close()
    assert [r.getMessage() for r in caplog.records] == ["sd_notify failed"]


def test_watchdog_interval_from_env() -> None:
    pid = str(os.getpid())
    assert SdNotifier({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": pid}).watchdog_interval_s == 30
    assert SdNotifier({"WATCHDOG_USEC": "30000000"}).watchdog_interval_s == 30
    assert (
        SdNotifier({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}).watchdog_interval_s is None
    )
    assert SdNotifier({"WATCHDOG_USEC": "0"}).watchdog_interval_s is None
