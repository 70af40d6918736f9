"""Options for reading recorded telemetry: which format, and what the file itself cannot say."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

FORMATS = ("auto", "trace", "nvidia-smi", "dcgmi", "csv", "kineto")

_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


@dataclass(frozen=True)
class ImportOptions:
    """What an importer needs beyond the file.

    `start_s` (seconds since the Unix epoch) and `interval_s` rebuild times for
    output that has none (dcgmi dmon). `tz` is the zone of local timestamps
    (nvidia-smi prints local time): "UTC" (the default), "local", an offset
    such as "+02:00", or an IANA name such as "Europe/Berlin". `fields` is the
    `--query-gpu` list of a CSV captured with `noheader`. `gpu_count` numbers
    GPUs by row order when a CSV has neither an index nor a uuid column.
    `columns` maps header names of a telemetry CSV to what they hold, as
    (key, "HEADER[@UNIT]") pairs; keys are metric names (`power_avg_w`) or
    the roles time, gpu, uuid, name, host, power_limit.
    """

    format: str = "auto"
    start_s: float | None = None
    interval_s: float | None = None
    tz: str = "UTC"
    fields: tuple[str, ...] | None = None
    gpu_count: int | None = None
    columns: tuple[tuple[str, str], ...] | None = None
    # Profiler traces: grid step, and the parallel sizes when the traces do not say.
    bin_s: float = 0.01
    pp_size: int | None = None
    tp_size: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r} (known: {', '.join(FORMATS)})")
        if self.interval_s is not None and not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s!r}")
        if self.gpu_count is not None and self.gpu_count < 1:
            raise ValueError(f"gpu_count must be >= 1, got {self.gpu_count!r}")
        if self.fields is not None and not self.fields:
            raise ValueError("fields must name at least one field")
        parse_tz(self.tz)


def parse_columns(text: str) -> tuple[tuple[str, str], ...]:
    """`KEY=HEADER[@UNIT],...` (`power_avg_w=Watts,gpu=card`) as (key, target) pairs."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, target = part.partition("=")
        if not sep or not key.strip() or not target.strip():
            raise ValueError(f"column mapping {part!r} must look like KEY=HEADER (e.g. gpu=card)")
        out.append((key.strip(), target.strip()))
    if not out:
        raise ValueError(f"no column mapping in {text!r}")
    return tuple(out)


def parse_tz(name: str) -> tzinfo:
    """The zone called `name`: "UTC", "local", "+HH:MM"/"-HHMM", or an IANA name."""
    key = name.strip()
    if key.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    if key.lower() == "local":
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else timezone.utc
    m = _OFFSET.match(key)
    if m:
        sign, hours, minutes = m.group(1), int(m.group(2)), int(m.group(3) or 0)
        if hours > 23 or minutes > 59:
            raise ValueError(f"bad UTC offset {name!r}")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if sign == "-" else delta)
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (use UTC, local, an offset like +02:00, "
            "or an IANA name like Europe/Berlin)"
        ) from None


def parse_time(text: str, tz: str = "UTC") -> float:
    """Seconds since the epoch from a number or an ISO 8601 time (naive times are in `tz`)."""
    s = text.strip()
    try:
        return float(s)
    except ValueError:
        pass
    iso = s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s
    try:
        dt = datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(
            f"cannot read time {text!r} (expected seconds since the epoch or ISO 8601 "
            "like 2026-11-29T08:14:10.123Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=parse_tz(tz))
    return dt.timestamp()
