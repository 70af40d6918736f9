"""nvidia-smi cells to columns: each column converted at once, its first bad cell named.

A run of data rows comes as its cells, column by column, with each row's
line number. Each column is converted in one pass where every cell is in
the plain form (bubblewatch.sources.importers._fastcsv); where one is not
(absent markers, an unusual spelling, a bad cell), that column is read cell
by cell with the readers of _smi_fields, which give the same value or raise
the error that names the line and field. Of the errors of a run, the one a
reader going row by row would meet first is raised: the lowest line, and on
that line the leftmost column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers import _fastcsv as fc
from bubblewatch.sources.importers._smi_fields import ABSENT, Column, gpu_index, number

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

TEXT_ROLES = ("uuid", "name", "pci_bus_id")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


@dataclass
class Rows:
    """A run of rows as columns: times (None: no timestamp column), GPU indices, values."""

    t_s: FloatArray | None
    index: IntArray | None
    values: dict[Metric, FloatArray]
    limit_w: FloatArray | None = None
    text: dict[str, Sequence[str]] = field(default_factory=dict)  # uuid, name, pci_bus_id cells
    unavailable: dict[str, str] = field(default_factory=dict)


def stamp(cell: str, tz: tzinfo, *, path: str, line: int) -> float:
    """One nvidia-smi timestamp (local time in `tz`) as epoch seconds."""
    for fmt in _TIME_FORMATS:
        try:
            dt = datetime.strptime(cell, fmt)
        except ValueError:
            continue
        return dt.replace(tzinfo=tz).timestamp()
    raise InputError(
        f"cannot read timestamp {cell!r} (expected YYYY/MM/DD HH:MM:SS.mmm, as nvidia-smi "
        "prints it)",
        path=path,
        line=line,
        field="timestamp",
    )


def convert(
    columns: list[Column], cells: list[str], lines: IntArray, tz: tzinfo, path: str
) -> Rows:
    """The run's rows (`cells` row after row, len(columns) each) as columns, or its first error."""
    k = len(columns)
    errors = fc.FirstError()
    rows = Rows(None, None, {})
    for i, c in enumerate(columns):
        f = c.field
        if f is None:
            continue
        col = cells[i::k]
        with errors.column(i):
            if f.role == "timestamp":
                rows.t_s = _stamps(col, lines, tz, path)
            elif f.role == "index":
                rows.index = _indices(c, col, lines, path)
            elif f.role in TEXT_ROLES:
                rows.text[f.role] = col  # stripped where used: most rows' are never read
            elif f.role == "power_limit":
                rows.limit_w = _numbers(c, col, lines, rows.unavailable, path)
            elif f.metric is not None:
                values = _numbers(c, col, lines, rows.unavailable, path)
                fc.checked(f.metric, values, _line_of(lines), path=path, field=c.name)
                rows.values[f.metric] = values
    errors.raise_first()
    return rows


def _line_of(lines: IntArray) -> Callable[[int], int]:
    return lambda j: int(lines[j])


def _cell_by_cell(col: list[str], lines: IntArray, read: Callable[[str, int], float]) -> FloatArray:
    return np.array([read(s.strip(), ln) for s, ln in _numbered(col, lines)])


def _numbered(col: list[str], lines: IntArray) -> Iterator[tuple[str, int]]:
    return zip(col, lines.tolist(), strict=True)


def _stamps(col: list[str], lines: IntArray, tz: tzinfo, path: str) -> FloatArray:
    t = fc.smi_stamps(col, tz)
    if t is not None:
        return t
    return _cell_by_cell(col, lines, lambda s, ln: stamp(s, tz, path=path, line=ln))


def _indices(c: Column, col: list[str], lines: IntArray, path: str) -> IntArray:
    out = fc.gpu_indices(col)
    if out is not None:
        return out
    read = [gpu_index(s, path=path, line=ln, field=c.name) for s, ln in _numbered(col, lines)]
    return np.array(read, dtype=np.int64)


def _numbers(
    c: Column, col: list[str], lines: IntArray, unavailable: dict[str, str], path: str
) -> FloatArray:
    """A number column in the field's unit and scale, NaN where absent (noted in `unavailable`)."""
    f = c.field
    assert f is not None
    if f.hex:
        return _distinct(c, col, lines, unavailable, path)
    values = fc.numbers(col, f.unit)
    if values is not None:
        return values * f.scale if f.scale != 1.0 else values
    out = np.full(len(col), np.nan)
    present = [j for j, s in enumerate(col) if not _absent(s.strip())]
    if len(present) < len(col):
        first = next(s.strip() for s in col if _absent(s.strip()))
        unavailable.setdefault(c.name, first or "empty")
    plain = fc.numbers([col[j] for j in present], f.unit)
    if plain is not None:
        out[present] = plain * f.scale if f.scale != 1.0 else plain
        return out
    for j in present:
        out[j] = _read(c, col[j], int(lines[j]), path)
    return out


def _distinct(
    c: Column, col: list[str], lines: IntArray, unavailable: dict[str, str], path: str
) -> FloatArray:
    """Each distinct cell read once (a bitmask column holds a few values, repeated)."""
    first: dict[str, int] = {}
    index = np.fromiter((first.setdefault(s, j) for j, s in enumerate(col)), np.intp, len(col))
    table = np.full(len(col), np.nan)
    for cell, j in first.items():  # in order of first appearance: the first bad one first
        s = cell.strip()
        if _absent(s):
            unavailable.setdefault(c.name, s or "empty")
            continue
        table[j] = _read(c, s, int(lines[j]), path)
    return table[index]


def _read(c: Column, cell: str, line: int, path: str) -> float:
    assert c.field is not None
    v = number(cell.strip(), c, c.field, {}, path=path, line=line)
    assert v is not None  # absent cells were taken out before
    return v


def _absent(cell: str) -> bool:
    return cell in ABSENT or (cell.startswith("[") and cell.endswith("]"))
