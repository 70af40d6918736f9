"""The nvidia-smi importer's fast path: a block of rows to columns, or False when in doubt.

A block qualifies when every line has the header's number of cells, no cell
is quoted and the header is not printed again in it; then each column is
converted at once (bubblewatch.sources.importers._fastcsv): timestamps,
indices, numbers with their unit, hex bitmasks, absent markers (`[N/A]`,
`N/A`: NaN, and noted in the meta as the row path notes them). Anything else
and the parser reads the block row by row, which names the first bad cell.
Nothing is changed in the parser until the whole block has been converted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import methodcaller
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers import _fastcsv as fc
from bubblewatch.sources.importers._common import bitmask

if TYPE_CHECKING:
    from bubblewatch.sources.importers._smi_fields import Column
    from bubblewatch.sources.importers.nvidia_smi import _Parser

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_ABSENT = frozenset({"", "N/A", "n/a", "NA"})
_TEXT_ROLES = ("uuid", "name", "pci_bus_id")


@dataclass
class Rows:
    """One block converted: times, GPU keys (or None: GPUs from the sampling), values."""

    t_s: FloatArray
    gpu: IntArray | None
    values: dict[Metric, FloatArray]
    limit_w: FloatArray | None = None
    text: dict[str, list[str]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    uuids: list[str] | None = None  # each row's GPU key without an index: uuid, else bus id


def convert(parser: _Parser, lines: list[str]) -> Rows | None:
    """The block's rows as columns, or None to read it row by row."""
    columns = parser.columns
    k = len(columns)
    if not lines or set(map(methodcaller("count", ","), lines)) != {k - 1}:
        return None  # a wrong row, a blank line: the row path decides
    roles = {c.field.role: i for i, c in enumerate(columns) if c.field is not None}
    text = ",".join(lines)
    if "timestamp" not in roles or '"' in text or _has_header(parser, text):
        return None
    cells = text.split(",")
    col = {i: cells[i::k] for i in range(k) if columns[i].field is not None}
    t = fc.smi_stamps(col[roles["timestamp"]], parser.tz)
    if t is None:
        return None
    gpu: IntArray | None = None
    uuids: list[str] | None = None
    if "index" in roles:
        gpu = fc.gpu_indices(col[roles["index"]])
        if gpu is None:
            return None
    elif "uuid" in roles or "pci_bus_id" in roles:
        # No index: the uuid, else the PCI bus id, tells the GPUs apart (a key per GPU).
        uuids = [c.strip() for c in col[roles["uuid" if "uuid" in roles else "pci_bus_id"]]]
        if not all(uuids):
            return None  # rows without one are numbered from the sampling: row by row
    rows = Rows(t, gpu, {}, uuids=uuids)
    for i, c in enumerate(columns):
        f = c.field
        if f is None or f.role in ("timestamp", "index"):
            continue
        if f.role in _TEXT_ROLES:
            rows.text[f.role] = col[i]
            continue
        values = _numbers(c, col[i], rows.unavailable)
        if values is None:
            return None
        if f.role == "power_limit":
            rows.limit_w = values
        elif f.metric is not None:
            if not fc.metric_ok(f.metric, values):
                return None
            rows.values[f.metric] = values
    return rows


def _has_header(parser: _Parser, text: str) -> bool:
    """The header printed again (a restarted capture) may be in `text`: the row path numbers."""
    if parser.header_cells is None:
        return False
    last = parser.header_cells[-1]
    return not last or last in text


def _numbers(col: Column, cells: list[str], unavailable: dict[str, str]) -> FloatArray | None:
    f = col.field
    assert f is not None
    if f.hex:
        return _hex(col, cells, unavailable)
    values = fc.numbers(cells, f.unit)
    if values is not None:
        return values * f.scale if f.scale != 1.0 else values
    # Absent markers among the numbers: one cell at a time.
    out = np.empty(len(cells), dtype=np.float64)
    for j, cell in _present(col, cells, out, unavailable):
        v = fc.numbers([cell], f.unit)
        if v is None:
            return None
        out[j] = v[0] * f.scale
    return out


def _hex(col: Column, cells: list[str], unavailable: dict[str, str]) -> FloatArray | None:
    """Each distinct cell read once (a bitmask column holds a few values, repeated)."""
    codes: dict[str, int] = {}
    index = np.fromiter((codes.setdefault(c, len(codes)) for c in cells), np.intp, len(cells))
    distinct = list(codes)  # in order of first appearance, as the rows would note them
    table = np.empty(len(distinct), dtype=np.float64)
    for j, cell in _present(col, distinct, table, unavailable):
        v = bitmask(cell)
        if v is None:
            return None
        table[j] = v
    return table[index]


def _present(
    col: Column, cells: list[str], out: FloatArray, unavailable: dict[str, str]
) -> Iterator[tuple[int, str]]:
    """(row, stripped cell) of the cells with a value; absent ones are NaN in `out`, and noted."""
    for j, raw in enumerate(cells):
        cell = raw.strip()
        if cell in _ABSENT or (cell.startswith("[") and cell.endswith("]")):
            unavailable.setdefault(col.name, cell or "empty")
            out[j] = np.nan
            continue
        yield j, cell
