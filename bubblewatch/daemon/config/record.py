"""The config's `record` section: where the daemon keeps a trace of what it samples, and rotation.

Without `path` nothing is recorded. Without `max_size` and `max_age` the trace
is the one file `path`, as long as the daemon runs; with either, the daemon
starts a new file (each a complete trace, named after its start time) when
the current one reaches that size or age, and keeps the newest `keep` files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bubblewatch.daemon.config.yamlsrc import Section
from bubblewatch.limits import RECORD_MAX_AGE_S, RECORD_MAX_KEEP

PathOf = Callable[[Section, str], Path | None]

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
# Powers of 1024, as Prometheus reads `--storage.tsdb.retention.size`.
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Rotation:
    """When to start a new file (0: never for that reason) and how many files to keep (0: all)."""

    max_size_bytes: int = 0
    max_age_s: float = 0.0
    keep: int = 0

    @property
    def enabled(self) -> bool:
        return self.max_size_bytes > 0 or self.max_age_s > 0


@dataclass(frozen=True)
class RecordConfig:
    """`record`: the trace path (None: no recording) and its rotation."""

    path: Path | None = None
    rotation: Rotation = Rotation()


def parse_size_bytes(value: object) -> int:
    """'256MB', '1GiB', '500K', '4096' (bytes); KB, MB, GB, TB are powers of 1024."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like '256MB' or '1GB', got {value!r}")
    if isinstance(value, (int, float)):
        f = float(value)
    else:
        m = _SIZE_RE.match(str(value))
        if not m:
            raise ValueError(f"expected a size like '256MB' or '1GB', got {value!r}")
        unit = (m.group(2) or "").upper()[:1]
        f = float(m.group(1)) * _SIZE_UNITS["" if unit == "B" else unit]
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"size must be finite and >= 0, got {value!r}")
    return int(f)


def read_record(s: Section, path_of: PathOf) -> RecordConfig:
    """The `record` section; ConfigError names the file, line and key of a bad value."""
    path = path_of(s, "path")
    max_size = s.get("max_size", 0, parse_size_bytes)
    max_age = s.duration_s("max_age", 0.0, positive=False, maximum_s=RECORD_MAX_AGE_S)
    keep = s.int_("keep", 0, minimum=0, maximum=RECORD_MAX_KEEP)
    s.finish()
    rotation = Rotation(max_size, max_age, keep)
    if rotation.enabled and path is None:
        key = "max_size" if max_size else "max_age"
        raise s.error(key, "rotation needs a trace to rotate: set record.path (or --record)")
    if keep and not rotation.enabled:
        raise s.error("keep", "keeping N files needs rotation: set max_size or max_age too")
    if 0 < max_size < 4096:
        raise s.error("max_size", f"must be at least 4KB (one header), got {max_size} bytes")
    return RecordConfig(path, rotation)
