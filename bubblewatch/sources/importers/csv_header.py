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
from operator import methodcaller

from bubblewatch.errors import InputError
from bubblewatch.limits import CSV_MAX_COLUMNS, CSV_MAX_GPUS, LimitError, gpu_index
from bubblewatch.model.metrics import METRICS, parse_metric
from bubblewatch.sources.importers._common import TextBlock
from bubblewatch.sources.importers.column_roles import (
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
from bubblewatch.sources.importers.import_options import ImportOptions


@dataclass(frozen=True)
class Col:
    """One header cell and what it holds."""

    index: int
    header: str
    kind: ColumnKind | None  # None: unrecognised (an annotation or ignored)
    gpu: int | None = None  # wide layout: the GPU the header names


@dataclass(frozen=True)
class Table:
    """The file's cells a column at a time: header, data columns, each row's line number."""

    header: list[str]
    columns: list[list[str]]
    lines: list[int]
    truncated: bool

    @property
    def n_rows(self) -> int:
        return len(self.lines)


def read_table(blocks: Iterable[TextBlock], path: str) -> Table:
    """The header and the cells, skipping comments, blank lines and repeated headers.

    A block of plain rows (no quotes, no comments, each with the header's
    number of cells) is split a column at a time; any other, a line at a time.
    """
    header: list[str] | None = None
    columns: list[list[str]] = []
    numbers: list[int] = []
    truncated = False
    seen = False
    for block in blocks:
        lines = block.lines
        first = 0
        while header is None and first < len(lines):
            text = lines[first]
            first += 1
            seen = True
            if text.strip() and not text.lstrip().startswith("#"):
                header = _header_cells(text, path, block.first_line + first - 1)
                columns = [[] for _ in header]
        if header is None:
            continue
        rest = lines[first:] if first else lines
        if block.last_ended and _plain(rest, header):
            k = len(header)
            cells = ",".join(rest).split(",")
            for i in range(k):
                columns[i] += [c.strip() for c in cells[i::k]]
            numbers += range(block.first_line + first, block.first_line + len(lines))
            continue
        for lineno, text, ended in block.numbered(first):
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            row = _cells(text)
            if row == header:
                continue  # header printed again (concatenated captures)
            if len(row) != len(header):
                if not ended:
                    truncated = True  # the logger was killed mid-line
                    continue
                raise InputError(
                    f"expected {len(header)} comma-separated fields like the header, "
                    f"got {len(row)}",
                    path=path,
                    line=lineno,
                )
            for i, c in enumerate(row):
                columns[i].append(c)
            numbers.append(lineno)
    if header is None:
        raise InputError("empty file: no header line", path=path, line=1 if seen else None)
    return Table(header, columns, numbers, truncated)


def _header_cells(text: str, path: str, lineno: int) -> list[str]:
    """The header's cells; more than CSV_MAX_COLUMNS is refused before any is split off."""
    if text.count(",") >= CSV_MAX_COLUMNS:
        raise LimitError(
            f"the header has more than {CSV_MAX_COLUMNS} comma-separated fields",
            path=path,
            line=lineno,
        )
    return _cells(text)


def _cells(text: str) -> list[str]:
    return [c.strip() for c in next(csv.reader([text], skipinitialspace=True), [])]


def _plain(lines: list[str], header: list[str]) -> bool:
    """Rows that split on commas alone: no quotes, comments, blank lines or the header again."""
    if not lines or not header[0] or any('"' in line for line in lines):
        return False
    if set(map(methodcaller("count", ","), lines)) != {len(header) - 1}:
        return False
    first = header[0]
    return not any(line.lstrip().startswith(("#", first)) for line in lines)


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
                gpu = gpu_index(wide[1], path=path, line=1, field=h)
                cols.append(Col(i, h, kind, gpu))
                continue
        cols.append(Col(i, h, None))
    n_gpus = len({c.gpu for c in cols if c.gpu is not None})
    if n_gpus > CSV_MAX_GPUS:
        raise LimitError(
            f"the header names {n_gpus} GPUs; a CSV holds at most {CSV_MAX_GPUS}",
            path=path,
            line=1,
        )
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
