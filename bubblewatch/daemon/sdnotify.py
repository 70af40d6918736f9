"""The sd_notify protocol, spoken directly on $NOTIFY_SOCKET (no libsystemd).

Each message is one datagram of newline-separated `KEY=value` lines sent to
the AF_UNIX socket systemd names in $NOTIFY_SOCKET; a leading '@' means the
Linux abstract namespace. Without $NOTIFY_SOCKET every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger("bubblewatch.sdnotify")


class SdNotifier:
    """Sends READY/STATUS/WATCHDOG/RELOADING/STOPPING; never raises, logs a failure once."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = None
        if raw.startswith("@"):
            self._address = b"\0" + raw[1:].encode()
        elif raw.startswith("/"):
            self._address = raw
        elif raw:
            log.warning("ignoring NOTIFY_SOCKET that is neither a path nor @abstract")
        self._watchdog_usec = _watchdog_usec(env)
        self._sock: socket.socket | None = None
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """systemd's WatchdogSec for this process, or None when no watchdog is armed."""
        return None if self._watchdog_usec is None else self._watchdog_usec / 1e6

    def notify(self, **fields: str | int) -> bool:
        """Send one message; keys are upper-cased. Returns True when it was sent."""
        if self._address is None:
            return False
        payload = "\n".join(f"{k.upper()}={_one_line(str(v))}" for k, v in fields.items())
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(payload.encode(), self._address)
        except OSError as e:
            if not self._failed:
                log.warning("sd_notify failed", extra={"kv": {"error": e.strerror or str(e)}})
                self._failed = True
            return False
        self._failed = False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify(ready=1, **({"status": status} if status else {}))

    def status(self, text: str) -> bool:
        return self.notify(status=text)

    def watchdog(self) -> bool:
        return self.notify(watchdog=1)

    def reloading(self) -> bool:
        """RELOADING=1 with MONOTONIC_USEC (systemd >= 253 Type=notify-reload wants both)."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify(reloading=1, monotonic_usec=usec)

    def stopping(self) -> bool:
        return self.notify(stopping=1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    raw = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not raw.isdigit() or int(raw) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (we are a child)
    return int(raw)


def _one_line(s: str) -> str:
    return s.replace("\n", " ")
