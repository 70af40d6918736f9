"""dcgmi dmon GPU rows to columns: each column converted at once, its first bad cell named.

A run of `GPU <id> <values>` rows comes as their tokens, with each row's
line number. Entity ids and each value column are converted in one pass
(Python's `float`, `int` for bitmasks, `N/A` absent, as dmon prints them);
where that fails, the column is read cell by cell to name the line and
field of the first bad cell. Of the errors of a run, the one a reader going
row by row would meet first is raised: the lowest line, and on that line the
token count, then the entity, then the leftmost value.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.limits import gpu_index
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers import _fastcsv as fc
from bubblewatch.sources.importers._dcgmi_layout import Column

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_COUNT, _ENTITY = -2, -1  # positions of a row's first checks, before its value columns


def entity_id(token: str, *, path: str, line: int, gpu: bool = True) -> int:
    """An entity id token; for a GPU row, a GPU index up to MAX_GPU_INDEX."""
    digits = token.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise InputError(f"entity id must be an integer, got {token!r}", path=path, line=line)
    if not gpu:
        return -1
    if token.startswith("-"):
        raise InputError(f"GPU id must be >= 0, got {token}", path=path, line=line)
    return gpu_index(digits, path=path, line=line, field="Entity")


def convert(
    names: list[str],
    columns: list[Column | None],
    rows: list[list[str]],
    lines: list[int],
    path: str,
) -> tuple[IntArray, dict[Metric, FloatArray]]:
    """The rows' GPU indices and metric columns (NaN: N/A), or the first error a reader meets."""
    width = len(names) + 2
    counts = np.fromiter(map(len, rows), np.int64, len(rows))
    wrong = np.flatnonzero(counts != width)
    errors = fc.FirstError()
    if wrong.size:
        j = int(wrong[0])
        got = max(int(counts[j]) - 2, 0)
        errors.add(
            _COUNT,
            InputError(
                f"expected an entity and {len(names)} values ({' '.join(names)}), got {got} values",
                path=path,
                line=lines[j],
            ),
        )
        rows, lines = rows[:j], lines[:j]  # a later row cannot hold the first error
    cells = list(zip(*rows, strict=True)) if rows else [() for _ in range(width)]
    gpu = np.zeros(0, dtype=np.int64)
    with errors.column(_ENTITY):
        gpu = _entities(list(cells[1]), lines, path)
    values: dict[Metric, FloatArray] = {}
    for i, (name, col) in enumerate(zip(names, columns, strict=True)):
        if col is not None:
            with errors.column(i):
                values[col.metric] = _values(name, col, list(cells[2 + i]), lines, path)
    errors.raise_first()
    return gpu, values


def _entities(cells: list[str], lines: list[int], path: str) -> IntArray:
    out = fc.gpu_indices(cells)
    if out is not None:
        return out
    read = [entity_id(c, path=path, line=ln) for c, ln in zip(cells, lines, strict=True)]
    return np.array(read, dtype=np.int64)


def _values(name: str, col: Column, cells: list[str], lines: list[int], path: str) -> FloatArray:
    """One value column in the metric's unit, NaN where N/A; checked as check_value checks."""
    out = np.full(len(cells), np.nan)
    present = [j for j, c in enumerate(cells) if c != "N/A"] if "N/A" in cells else None
    given = cells if present is None else [cells[j] for j in present]
    read = _read_int if col.integer else float
    try:
        v = np.array([read(c) for c in given], dtype=np.float64) * col.scale
    except (ValueError, OverflowError):  # OverflowError: beyond a float
        for c, j in zip(given, present or range(len(cells)), strict=True):
            try:
                read(c)
            except (ValueError, OverflowError):
                raise InputError(
                    f"must be a number or N/A, got {c!r}", path=path, line=lines[j], field=name
                ) from None
        raise  # pragma: no cover (the loop above meets the cell that failed)
    at = np.arange(len(cells)) if present is None else np.array(present, dtype=np.intp)
    line_of = lines.__getitem__ if present is None else (lambda j: lines[present[j]])
    fc.checked(col.metric, v, line_of, path=path, field=name, nan_is_absent=False)
    out[at] = v
    return out


def _read_int(cell: str) -> float:
    return float(int(cell))
