"""The layout of `dcgmi dmon` output: its columns, the header, comment lines, entity names.

The mapping of columns to metrics is told in bubblewatch.sources.importers.dcgmi.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bubblewatch.errors import InputError
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers._pieces import best_columns
from bubblewatch.sources.importers.import_options import parse_time


@dataclass(frozen=True)
class Column:
    metric: Metric
    scale: float = 1.0
    priority: int = 0  # when two columns give one metric, the lower number wins
    integer: bool = False


COLUMNS: dict[str, Column] = {
    "POWER": Column(Metric.POWER_AVG_W),
    "POWINST": Column(Metric.POWER_INSTANT_W),
    "TOTEC": Column(Metric.ENERGY_J, 1e-3),
    "GPUTL": Column(Metric.KERNEL_BUSY_RATIO, 0.01, 0),
    "GRACT": Column(Metric.KERNEL_BUSY_RATIO, 1.0, 1),
    "SMACT": Column(Metric.SM_ACTIVE_RATIO),
    "SMOCC": Column(Metric.SM_OCCUPANCY_RATIO),
    "TENSO": Column(Metric.TENSOR_ACTIVE_RATIO),
    "SMCLK": Column(Metric.SM_CLOCK_MHZ),
    "TMPTR": Column(Metric.TEMPERATURE_C),
    "PCITX": Column(Metric.PCIE_TX_BYTES_PER_S, 1.0, 0),
    "PCIRX": Column(Metric.PCIE_RX_BYTES_PER_S, 1.0, 0),
    "TXTPT": Column(Metric.PCIE_TX_BYTES_PER_S, 1024.0, 1),
    "RXTPT": Column(Metric.PCIE_RX_BYTES_PER_S, 1024.0, 1),
    "DVCCTR": Column(Metric.CLOCKS_EVENT_REASONS, integer=True),
}

HEADER = re.compile(r"^#\s*Entity\b")
UNITS_FIRST = {"ID", "Id", "id"}
OTHER_ENTITIES = {
    "GPU-I",
    "GPU-CI",
    "GPU_I",
    "GPU_CI",
    "vGPU",
    "Switch",
    "CPU",
    "CPU_CORE",
    "Link",
}
STOPPED = re.compile(r"^dmon was stopped", re.IGNORECASE)
DCGMI_ERROR = re.compile(r"^(Error|Unable|Failed)\b", re.IGNORECASE)
_DELAY = re.compile(r"(?:^|\s)(?:-d|--delay)(?:\s+|=)(\d+(?:\.\d+)?)")
_INTERVAL_MS = re.compile(r"\binterval_ms=(\d+(?:\.\d+)?)")
_START = re.compile(r"\bstart=(\S+)")


def header_columns(names: list[str], *, path: str, line: int) -> list[Column | None]:
    """The column each header name gives, one per metric (the lowest priority), None if unused."""
    columns = [COLUMNS.get(n) for n in names]
    best = best_columns([None if c is None else (c.metric, c.priority) for c in columns])
    if not best:
        known = ", ".join(COLUMNS)
        raise InputError(
            f"no field bubblewatch can use in {' '.join(names)} (known: {known})",
            path=path,
            line=line,
        )
    return [c if c is not None and best[c.metric] == i else None for i, c in enumerate(columns)]


def comment_interval_s(text: str, *, path: str, line: int) -> float | None:
    """The sampling interval a comment line gives (`interval_ms=N`, or dmon's `-d N`), if any."""
    m = _INTERVAL_MS.search(text)
    if m is None and "dmon" in text:
        m = _DELAY.search(text)
    if m is None:
        return None
    ms = float(m.group(1))
    if ms <= 0:
        raise InputError(
            f"interval must be > 0 ms, got {ms:g}", path=path, line=line, field="interval"
        )
    return ms / 1000.0


def comment_start_s(text: str, tz: str, *, path: str, line: int) -> float | None:
    """The start time a comment line gives (`start=<ISO 8601 or epoch seconds>`), if any."""
    m = _START.search(text)
    if m is None:
        return None
    try:
        return parse_time(m.group(1), tz)
    except ValueError as e:
        raise InputError(str(e), path=path, line=line, field="start") from None
