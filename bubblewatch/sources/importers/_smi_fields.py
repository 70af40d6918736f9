"""nvidia-smi's --query-gpu fields: what each means, the header that names them, their cells.

The mapping of fields to metrics is told in bubblewatch.sources.importers.nvidia_smi.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bubblewatch.errors import InputError
from bubblewatch.limits import gpu_index as bounded_gpu_index
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers._common import bitmask
from bubblewatch.sources.importers._pieces import best_columns
from bubblewatch.sources.importers.import_options import ImportOptions


@dataclass(frozen=True)
class Field:
    """What one --query-gpu field means to bubblewatch."""

    role: str  # timestamp | index | uuid | name | pci_bus_id | power_limit | metric
    metric: Metric | None = None
    unit: str = ""
    scale: float = 1.0
    hex: bool = False
    priority: int = 0  # when two columns give one metric, the lower number wins


_W, _PCT, _MHZ = "W", "%", "MHz"

FIELDS: dict[str, Field] = {
    "timestamp": Field("timestamp"),
    "index": Field("index"),
    "uuid": Field("uuid"),
    "gpu_uuid": Field("uuid"),
    "name": Field("name"),
    "gpu_name": Field("name"),
    "pci.bus_id": Field("pci_bus_id"),
    "gpu_bus_id": Field("pci_bus_id"),
    "power.limit": Field("power_limit", unit=_W),
    # power.draw is NVML's power reading wherever it is read: the 1 s average (which
    # power.draw.average repeats) on Ampere except GA100 and newer, the instant on GA100 and
    # older, where power.draw.average is [N/A] (preferring it lost an A100's power).
    "power.draw": Field("metric", Metric.POWER_AVG_W, _W, priority=0),
    "power.draw.average": Field("metric", Metric.POWER_AVG_W, _W, priority=1),
    "power.draw.instant": Field("metric", Metric.POWER_INSTANT_W, _W),
    "utilization.gpu": Field("metric", Metric.KERNEL_BUSY_RATIO, _PCT, scale=0.01),
    "clocks.current.sm": Field("metric", Metric.SM_CLOCK_MHZ, _MHZ, priority=0),
    "clocks.sm": Field("metric", Metric.SM_CLOCK_MHZ, _MHZ, priority=1),
    "temperature.gpu": Field("metric", Metric.TEMPERATURE_C, "C"),
    "memory.used": Field("metric", Metric.MEMORY_USED_BYTES, "MiB", scale=1024.0 * 1024.0),
    "clocks_event_reasons.active": Field(
        "metric", Metric.CLOCKS_EVENT_REASONS, hex=True, priority=0
    ),
    "clocks_throttle_reasons.active": Field(
        "metric", Metric.CLOCKS_EVENT_REASONS, hex=True, priority=1
    ),
}

_HEADER_CELL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[([^\]]*)\])?$")
_NUMBER = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)?$")
ABSENT = {"", "N/A", "n/a", "NA"}


@dataclass(frozen=True)
class Column:
    name: str
    header_unit: str | None
    field: Field | None  # None: a field bubblewatch does not use


def first_line_columns(
    cells: list[str], opts: ImportOptions, *, path: str, line: int
) -> tuple[list[Column], bool]:
    """The columns the file's first line gives, and whether that line is a header.

    Without a header the columns come from `opts.fields` (--fields).
    """
    parsed = [_HEADER_CELL.match(c) for c in cells]
    looks_like_header = all(parsed) and any(
        m is not None and m.group(1).lower() in FIELDS for m in parsed
    )
    if looks_like_header:
        names = [(m.group(1), m.group(2)) for m in parsed if m is not None]
        if opts.fields is not None:
            given = [f.lower() for f in opts.fields]
            if given != [n.lower() for n, _ in names]:
                raise InputError(
                    f"the header names fields {', '.join(n for n, _ in names)} but "
                    f"--fields gave {', '.join(opts.fields)}",
                    path=path,
                    line=line,
                )
    elif opts.fields is not None:
        names = [(f, None) for f in opts.fields]
    else:
        raise InputError(
            "no header line: this looks like --format=csv,noheader output; give the "
            "--query-gpu field list (for example --fields timestamp,index,power.draw)",
            path=path,
            line=line,
        )
    return _columns(names, opts, path=path, line=line), looks_like_header


def _columns(
    names: list[tuple[str, str | None]], opts: ImportOptions, *, path: str, line: int
) -> list[Column]:
    cols: list[Column] = []
    for name, unit in names:
        field = FIELDS.get(name.lower())
        if field is not None and unit is not None and unit.strip() != field.unit:
            raise InputError(
                f"unit [{unit}] is not the one nvidia-smi prints for this field ([{field.unit}])",
                path=path,
                line=line,
                field=name,
            )
        cols.append(Column(name, unit, field))
    best = best_columns(
        [
            None
            if c.field is None or c.field.metric is None
            else (c.field.metric, c.field.priority)
            for c in cols
        ]
    )
    # Keep one column per metric (power.draw over power.draw.average, and so on).
    columns = [
        c
        if c.field is None or c.field.metric is None or best[c.field.metric] == i
        else Column(c.name, c.header_unit, None)
        for i, c in enumerate(cols)
    ]
    roles = {c.field.role for c in columns if c.field is not None}
    if not best:
        known = ", ".join(k for k, f in FIELDS.items() if f.metric is not None)
        raise InputError(
            f"no field bubblewatch can use (known metric fields: {known})", path=path, line=line
        )
    if "timestamp" not in roles and opts.interval_s is None:
        raise InputError(
            "no timestamp column: give the sampling interval (--interval) and, if known, "
            "the start time (--start) to rebuild times",
            path=path,
            line=line,
        )
    if not roles & {"index", "uuid"} and "timestamp" not in roles and not opts.gpu_count:
        raise InputError(
            "no index, uuid or timestamp column: give the number of GPUs (--gpu-count) "
            "to number rows",
            path=path,
            line=line,
        )
    return columns


def gpu_index(cell: str, *, path: str, line: int, field: str) -> int:
    """An index cell: a non-negative integer up to MAX_GPU_INDEX."""
    text = cell.strip()
    digits = text.removeprefix("+")
    if not (digits.isascii() and digits.isdigit()):
        if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
            raise InputError(
                f"must be a non-negative GPU index, got {cell!r}", path=path, line=line, field=field
            )
        raise InputError(f"must be a GPU index, got {cell!r}", path=path, line=line, field=field)
    return bounded_gpu_index(digits, path=path, line=line, field=field)


def number(
    cell: str, col: Column, field: Field, unavailable: dict[str, str], *, path: str, line: int
) -> float | None:
    """A number cell in the field's unit and scale; None (noted in `unavailable`) when absent."""
    if cell in ABSENT or (cell.startswith("[") and cell.endswith("]")):
        unavailable.setdefault(col.name, cell or "empty")
        return None
    if field.hex:
        v = bitmask(cell)
        if v is None:
            raise InputError(
                f"must be a bitmask like 0x0000000000000004, got {cell!r}",
                path=path,
                line=line,
                field=col.name,
            )
        return v
    m = _NUMBER.match(cell)
    if m is None:
        raise InputError(f"must be a number, got {cell!r}", path=path, line=line, field=col.name)
    unit = m.group(2)
    if unit is not None and unit != field.unit:
        raise InputError(
            f"unit {unit!r} is not the one expected here ({field.unit or 'none'})",
            path=path,
            line=line,
            field=col.name,
        )
    return float(m.group(1)) * field.scale
