"""A block of nvidia-smi data rows straight from its bytes: each used column parsed in numpy.

The fast path of the nvidia-smi parser (docs/inputs.md, "Long recordings").
It takes a block only when every line is a data row of the header's cells
in the plainest form: printable ASCII, no quote, timestamps of one width,
indices of digits, numbers without exponent of at most 15 digits with or
without the column's unit, absent markers (`[N/A]`, `[Not Supported]`,
`N/A`, an empty cell), bitmasks the cell reader accepts, every value in its
metric's range. Anything else gives None and the block is read the exact
way (_smi_columns), which gives the same values for what is accepted here
and names a bad cell's line and field. Numbers are computed as mantissa /
10**digits, one correctly rounded division: the float Python's `float()`
gives for the same text. A column in nvidia-smi's own spelling is read a
word per cell (_wordcells); any other, by a byte matrix (_bytecells).
"""

from __future__ import annotations

from datetime import tzinfo

import numpy as np
import numpy.typing as npt

from bubblewatch.limits import MAX_GPU_INDEX
from bubblewatch.sources.importers import _bytecells as bc
from bubblewatch.sources.importers import _wordcells as wc
from bubblewatch.sources.importers._common import bitmask
from bubblewatch.sources.importers._fastcsv import metric_ok, smi_stamp_matrix
from bubblewatch.sources.importers._smi_columns import TEXT_ROLES, Rows
from bubblewatch.sources.importers._smi_fields import ABSENT, Column, Field

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_ABSENT_WORDS = tuple(w.encode() for w in sorted(ABSENT) if w)
_ABSENT_FIRST = np.array(sorted({w[0] for w in _ABSENT_WORDS}), dtype=np.uint8)


def fast_rows(
    columns: list[Column], data: bytes, n: int, tz: tzinfo, scratch: bc.Scratch | None = None
) -> Rows | None:
    """The n rows of `data` (lines joined by newlines) as columns; None: read them the exact way.

    `scratch`: the byte masks of the block before, reused.
    """
    cells = bc.split_rows(data, n, len(columns), scratch)
    if cells is None:
        return None
    rows = Rows(None, None, {})
    for i, c in enumerate(columns):
        f = c.field
        if f is None:
            continue
        if f.role in TEXT_ROLES:  # as the exact path keeps them: stripped where read
            rows.text[f.role] = bc.texts(cells.buf, *cells.column(i))
            continue
        taken = _by_words(rows, f, cells, i, tz)
        if taken is not None:
            if not taken:
                return None
            continue
        s, e = bc.stripped(cells, i)
        if len(columns) == 1 and bool((s == e).any()):
            return None  # a blank line: the exact path skips it
        if f.role == "timestamp":
            rows.t_s = _stamps(cells.buf, s, e, tz)
            if rows.t_s is None:
                return None
        elif f.role == "index":
            index = bc.whole_numbers(cells.buf, s, e)
            if index is None or not _take(rows, f, index):
                return None
        else:
            values = _numbers(c, cells, s, e, rows.unavailable)
            if values is None or not _take(rows, f, values):
                return None
    return rows


def _by_words(rows: Rows, f: Field, cells: bc.Cells, i: int, tz: tzinfo) -> bool | None:
    """Column i into `rows` by _wordcells: True; None when it is not in the usual spelling.

    False: a value outside what the exact path accepts. A column in the usual
    spelling has no blank line and no absent cell.
    """
    if f.role == "timestamp":
        rows.t_s = wc.smi_stamps(cells.buf, cells.words, *cells.column(i), tz)
        return None if rows.t_s is None else True
    values = _plain_numbers(f, cells, i)
    return None if values is None else _take(rows, f, values)


def _plain_numbers(f: Field, cells: bc.Cells, i: int) -> npt.NDArray[np.float64 | np.int64] | None:
    """Column i by _wordcells, in the field's scale; None: read it with _bytecells."""
    buf, w8 = cells.buf, cells.words
    s, e = cells.column(i)
    if f.role == "index":
        return wc.whole_numbers(buf, w8, s, e)
    if f.hex:
        return wc.hex_numbers(buf, w8, s, e)
    values = wc.decimals(buf, w8, s, e, f.unit)
    return values * f.scale if values is not None and f.scale != 1.0 else values


def _take(rows: Rows, f: Field, values: npt.NDArray[np.float64 | np.int64]) -> bool:
    """A number column into `rows`; False when a value is outside what the exact path accepts."""
    if f.role == "index":
        if values.size and int(values.max()) > MAX_GPU_INDEX:
            return False
        rows.index = values.astype(np.int64, copy=False)
    elif f.role == "power_limit":
        rows.limit_w = values.astype(np.float64, copy=False)
    elif f.metric is not None:
        if not metric_ok(f.metric, values.astype(np.float64, copy=False)):
            return False
        rows.values[f.metric] = values.astype(np.float64, copy=False)
    return True


def _stamps(buf: bc.ByteMatrix, s: IntArray, e: IntArray, tz: tzinfo) -> FloatArray | None:
    width = e - s
    if not s.size or bool((width != width[0]).any()):
        return None
    return smi_stamp_matrix(bc.matrix(buf, s, e), tz)


def _numbers(
    c: Column, cells: bc.Cells, s: IntArray, e: IntArray, unavailable: dict[str, str]
) -> FloatArray | None:
    """A number column in the field's unit and scale, NaN where absent (noted in `unavailable`)."""
    f = c.field
    assert f is not None
    buf, tabs = cells.buf, cells.tabs
    absent = _absent(buf, s, e)
    out = np.full(s.shape, np.nan)
    if absent.any():
        j = int(np.argmax(absent))
        unavailable.setdefault(c.name, buf[s[j] : e[j]].tobytes().decode() or "empty")
        present = np.flatnonzero(~absent)
        s, e = s[present], e[present]
    else:
        present = None
    if f.hex:
        values = _bitmasks(buf, s, e)
    else:
        if f.unit:
            unit = bc.ends_with(buf, s, e, f.unit.encode())
            e = e.copy()
            e[unit] -= len(f.unit)
            s, e = bc.strip(buf, s.copy(), e, tabs=tabs)
        values = bc.decimals(buf, s, e)
        if values is not None and f.scale != 1.0:
            values = values * f.scale
    if values is None:
        return None
    if present is None:
        return values
    out[present] = values
    return out


def _absent(buf: bc.ByteMatrix, s: IntArray, e: IntArray) -> bc.BoolArray:
    """The cells that mean "not reported": empty, N/A and the like, any [bracketed note]."""
    first = buf[s]
    absent: bc.BoolArray = s == e
    maybe = first == ord("[")
    if maybe.any():
        absent |= maybe & (e - s >= 2) & (buf[e - 1] == ord("]"))
    if bool(np.isin(first, _ABSENT_FIRST).any()):
        for word in _ABSENT_WORDS:
            absent |= bc.equals(buf, s, e, word)
    return absent


def _bitmasks(buf: bc.ByteMatrix, s: IntArray, e: IntArray) -> FloatArray | None:
    """Bitmask cells as the cell reader reads them: vectorised, else each distinct cell once."""
    fast = bc.hex_numbers(buf, s, e)
    if fast is not None:
        return fast
    distinct, inverse = np.unique(bc.fixed_bytes(buf, s, e), return_inverse=True)
    table = np.empty(distinct.size)
    for k, cell in enumerate(distinct.tolist()):
        v = bitmask(cell.decode("ascii"))
        if v is None:
            return None
        table[k] = v
    out: FloatArray = table[inverse.reshape(-1)]
    return out
