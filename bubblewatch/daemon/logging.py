"""Daemon logging: journald-friendly, logfmt or JSON, with repeated failures rate-limited.

Structured fields travel in `extra={"kv": {...}}`. A record with
`extra={"ratelimit_key": key}` is logged at most once per interval for that
key; the next one that gets through says how many were suppressed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

FORMATS = ("logfmt", "json")
LEVELS = ("debug", "info", "warning", "error")
# syslog priorities for journald's "<N>" line prefix (SyslogLevelPrefix=yes).
_JOURNAL_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3}


def under_journald(stream: TextIO, env: Mapping[str, str]) -> bool:
    """True when `stream` is connected to the journal ($JOURNAL_STREAM is its dev:inode)."""
    value = env.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return value == f"{st.st_dev}:{st.st_ino}"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    kv = getattr(record, "kv", None)
    return dict(kv) if isinstance(kv, Mapping) else {}


# Control characters (C0, DEL, C1) in a value: a path such as /\x1b[2J would reach a
# terminal or a log viewer raw. They are written as escapes, never as themselves.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _logfmt_value(v: object) -> str:
    s = "" if v is None else str(v)
    if s and not any(c in s for c in ' ="\\') and _CONTROL.search(s) is None:
        return s
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    s = _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), s)
    return f'"{s}"'


class LogfmtFormatter(logging.Formatter):
    """`ts=... level=info logger=bubblewatch.x msg="..." key=value`; no ts under journald."""

    def __init__(self, timestamps: bool) -> None:
        super().__init__()
        self.timestamps = timestamps

    def format(self, record: logging.LogRecord) -> str:
        parts: list[tuple[str, object]] = []
        if self.timestamps:
            parts.append(("ts", _iso(record.created)))
        parts += [
            ("level", record.levelname.lower()),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        parts += list(_fields(record).items())
        if record.exc_info:
            parts.append(("exc", self.formatException(record.exc_info)))
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in parts)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; no ts under journald (the journal has it)."""

    def __init__(self, timestamps: bool) -> None:
        super().__init__()
        self.timestamps = timestamps

    def format(self, record: logging.LogRecord) -> str:
        d: dict[str, Any] = {}
        if self.timestamps:
            d["ts"] = _iso(record.created)
        d.update(level=record.levelname.lower(), logger=record.name, msg=record.getMessage())
        for k, v in _fields(record).items():
            d.setdefault(k, v)
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return json.dumps(d, default=str, separators=(",", ":"))


class JournalPrefixFormatter(logging.Formatter):
    """Wraps a formatter with the `<N>` syslog-priority prefix journald parses from stderr."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prio = _JOURNAL_PRIORITY.get(record.levelno, 2 if record.levelno > logging.ERROR else 6)
        return f"<{prio}>{self.inner.format(record)}"


class RateLimitFilter(logging.Filter):
    """Lets a record with a `ratelimit_key` through once per `interval_s` per key."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0, got {interval_s}")
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = getattr(record, "ratelimit_key", None)
        if not isinstance(key, str):
            return True
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            record.kv = {**_fields(record), "suppressed": suppressed}
        return True


def configure_logging(
    level: str = "info",
    fmt: str = "logfmt",
    *,
    stream: TextIO | None = None,
    env: Mapping[str, str] | None = None,
    ratelimit_interval_s: float = 300.0,
    logger_name: str = "bubblewatch",
) -> logging.Handler:
    """Install one handler on the `bubblewatch` logger (replacing any earlier one)."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {LEVELS}, got {level!r}")
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    stream = stream or sys.stderr
    journald = under_journald(stream, os.environ if env is None else env)
    inner: logging.Formatter = (
        JsonFormatter(not journald) if fmt == "json" else LogfmtFormatter(not journald)
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JournalPrefixFormatter(inner) if journald else inner)
    handler.addFilter(RateLimitFilter(ratelimit_interval_s))
    logger = logging.getLogger(logger_name)
    for old in list(logger.handlers):
        if getattr(old, "_bubblewatch", False):
            logger.removeHandler(old)
    handler._bubblewatch = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return handler


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"
