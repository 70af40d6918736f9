"""The generic CSV importer's first step: the file's cells, and what each header names.

`read_table` splits the lines into a header and rows (skipping comments and
repeated headers, noting a last line cut short); `header_columns` says what
each column holds (recognised spelling, the `--columns` mapping, a wide
layout's GPU) or refuses a file with no per-GPU measurement.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass

from bubblewatch.model.metrics import METRICS, parse_metric
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.importers.columns import (
    NAME,
    POWER_LIMIT,
    ROLES,
    UUID,
    ColumnKind,
    known_names,
    normalise,
    recognise,
    split_gpu,
    unit_scale,
)
from bubblewatch.sources.importers.options import ImportOptions


@dataclass(frozen=True)
class Col:
    """One header cell and what it holds."""

    index: int
    header: str
    kind: ColumnKind | None  # None: unrecognised (an annotation or ignored)
    gpu: int | None = None  # wide layout: the GPU the header names


@dataclass(frozen=True)
class Table:
    """The file's cells: header, data rows and the line number of each row."""

    header: list[str]
    rows: list[list[str]]
    lines: list[int]
    truncated: bool


def read_table(lines: Iterable[tuple[int, str, bool]], path: str) -> Table:
    header: list[str] | None = None
    rows: list[list[str]] = []
    numbers: list[int] = []
    truncated = False
    pending: tuple[int, str, bool] | None = None
    items = list(lines)
    for k, (lineno, text, ended) in enumerate(items):
        pending = (lineno, text, ended)
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in next(csv.reader([text], skipinitialspace=True), [])]
        if header is None:
            header = cells
            continue
        if cells == header:
            continue  # header printed again (concatenated captures)
        if len(cells) != len(header):
            if k == len(items) - 1 and not ended:
                truncated = True  # the logger was killed mid-line
                continue
            raise InputError(
                f"expected {len(header)} comma-separated fields like the header, got {len(cells)}",
                path=path,
                line=lineno,
            )
        rows.append(cells)
        numbers.append(lineno)
    if header is None:
        raise InputError("empty file: no header line", path=path, line=1 if pending else None)
    return Table(header, rows, numbers, truncated)


def header_columns(header: list[str], opts: ImportOptions, path: str) -> list[Col]:
    mapped = _mapping(opts, header, path)
    cols = []
    for i, h in enumerate(header):
        if h in mapped:
            cols.append(Col(i, h, mapped[h]))
            continue
        name, unit = normalise(h)
        kind = recognise(name, unit)
        if kind is not None:
            cols.append(Col(i, h, kind))
            continue
        wide = split_gpu(name)
        if wide is not None:
            kind = recognise(wide[0], unit)
            if kind is not None and kind.role in ("metric", POWER_LIMIT, NAME, UUID):
                cols.append(Col(i, h, kind, wide[1]))
                continue
        cols.append(Col(i, h, None))
    if not any(c.kind is not None and c.kind.role == "metric" for c in cols):
        raise InputError(
            "not GPU telemetry: no column names a per-GPU measurement (expected a header "
            f"with fields such as {known_names()}); name the columns with --columns "
            "KEY=HEADER,... (docs/inputs.md)",
            path=path,
            line=1,
        )
    return cols


def _mapping(opts: ImportOptions, header: list[str], path: str) -> dict[str, ColumnKind]:
    """Header -> kind from ImportOptions.columns (`KEY=HEADER[@UNIT]`)."""
    out: dict[str, ColumnKind] = {}
    for key, target in opts.columns or ():
        column, _, unit = target.partition("@")
        if column not in header:
            raise InputError(
                f"--columns maps {key!r} to {column!r}, which the header does not have "
                f"(it has {', '.join(header)})",
                path=path,
                line=1,
                field=column,
            )
        if key in ROLES:
            out[column] = ColumnKind(key)
            continue
        try:
            metric = parse_metric(key)
        except ValueError as e:
            raise InputError(
                f"--columns key {key!r}: {e}; or one of {', '.join(ROLES)}", path=path
            ) from None
        if unit:
            scale = unit_scale(metric, unit)
            if scale is None:
                raise InputError(
                    f"--columns {key}={target}: unknown unit {unit!r} (e.g. percent, mw, mib)",
                    path=path,
                )
        else:
            scale = None if METRICS[metric].unit == "ratio" else 1.0
        out[column] = ColumnKind("metric", metric, scale)
    return out
