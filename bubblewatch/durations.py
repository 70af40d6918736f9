"""Durations as the config and the command line spell them: `250ms`, `10s`, `5m`, `1h`, `1d`.

Shared by the daemon's config (bubblewatch.daemon.config.yamlsrc) and `analyze
--peak-horizon`, without importing the daemon.
"""

from __future__ import annotations

import math
import re

__all__ = ["format_duration", "parse_duration_s"]

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration_s(value: object) -> float:
    """'250ms', '10s', '5m', '1h', '1d' or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '10s' or '5m', got {value!r}")
    if isinstance(value, (int, float)):
        f = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if not m:
            raise ValueError(f"expected a duration like '10s' or '5m', got {value!r}")
        f = float(m.group(1)) * _UNIT_S[m.group(2)]
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"duration must be finite and >= 0, got {value!r}")
    return f


def format_duration(seconds: float) -> str:
    """The largest unit that shows `seconds` whole: 86400 -> '1d', 0.25 -> '250ms'."""
    for unit in ("d", "h", "m", "s"):
        n = seconds / _UNIT_S[unit]
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"
