"""The dcgmi importer's fast path: a block of `GPU <id> <values>` rows to columns, or None.

A block qualifies when each of its lines is a GPU row with the header's
number of values, the header printed again (the same names), the units line
or blank; each value column is then converted at once with the same
conversion the row path uses (`float`, `int` for bitmasks, `N/A` absent) and
checked as `check_value` checks it. The ticks are counted as the row path
counts them (a GPU seen again, or the header printed again, starts the next).
Anything else, and the parser reads the block row by row, which names the
first bad line and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers import _fastcsv as fc

if TYPE_CHECKING:
    from bubblewatch.sources.importers.dcgmi import _Parser

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_UNITS_FIRST = frozenset({"ID", "Id", "id"})


@dataclass
class Rows:
    """One block converted: each row's tick and GPU, the metric columns, the tick state after."""

    tick: IntArray
    gpu: IntArray
    values: dict[Metric, FloatArray]
    last_tick: int
    tick_gpus: set[int]


def convert(parser: _Parser, lines: list[str]) -> Rows | None:
    """The block's rows as columns, or None to read it row by row."""
    header = parser.header_text
    n = len(parser.names)
    rows: list[list[str]] = []
    marks: list[int] = []  # row positions where the header was printed again
    for line in lines:
        if line.startswith("GPU "):
            rows.append(line.split())
            continue
        text = line.strip()
        if not text or text.split(maxsplit=1)[0] in _UNITS_FIRST:
            continue
        if text == header:
            marks.append(len(rows))
            continue
        return None  # a comment, another entity, an error: the row path decides
    if not rows or set(map(len, rows)) != {n + 2}:
        return None
    columns = list(zip(*rows, strict=True))
    gpu = fc.gpu_indices(columns[1])
    if gpu is None:
        return None
    values: dict[Metric, FloatArray] = {}
    for col, cells in zip(parser.columns, columns[2:], strict=True):
        if col is None:
            continue
        try:
            if col.integer:
                raw = [np.nan if c == "N/A" else float(int(c)) for c in cells]
            else:
                raw = [np.nan if c == "N/A" else float(c) for c in cells]
        except ValueError:
            return None
        v = np.array(raw, dtype=np.float64) * col.scale
        if bool(np.isnan(v).any()) and not _only_absent_nan(cells, v):
            return None  # a "nan" written as such: check_value refuses it
        if not fc.metric_ok(col.metric, v):
            return None
        values[col.metric] = v
    tick, last, seen = _ticks(gpu, marks, parser.tick, parser.tick_gpus)
    return Rows(tick, gpu, values, last, seen)


def _only_absent_nan(cells: tuple[str, ...], v: FloatArray) -> bool:
    absent = np.array([c == "N/A" for c in cells])
    return bool((np.isnan(v) == absent).all())


def _ticks(
    gpu: IntArray, marks: list[int], tick: int, seen: set[int]
) -> tuple[IntArray, int, set[int]]:
    """Each row's tick: a new one when its GPU was seen in this tick, or after a header."""
    out = np.empty(gpu.size, dtype=np.int64)
    ends = set(marks)
    current = set(seen)
    for k, g in enumerate(gpu.tolist()):
        if k in ends:
            current = set()
        if not current or g in current:
            tick += 1
            current = set()
        current.add(g)
        out[k] = tick
    if gpu.size in ends:
        current = set()
    return out, tick, current
