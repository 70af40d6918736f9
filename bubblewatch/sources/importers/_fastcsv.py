"""Whole columns of CSV text to numpy arrays at once, for the importers' column converters.

Each function takes the cells of one column of a block and returns an array,
or None when a cell is not in the plain form it expects; the importer then
reads that column cell by cell with its cell readers, which give the same
value for what these accept and name the line and field of a bad cell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.limits import MAX_GPU_INDEX
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.sources.importers._common import RATIO_SLACK, check_value

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# What a column of numbers (or of indices) may hold once its units are taken out.
_INDEX_BYTES = b"0123456789 \t\n"
_NUMBER_BYTES = b"0123456789.+-eE \t\n"
_BLANKS = " \t\r"
_AROUND_LINE_BREAK = (" \n", "\t\n", "\r", "\n ", "\n\t")
_STAMP_WIDTH = 19  # YYYY/MM/DD HH:MM:SS
_MINUTE_WIDTH = 16  # YYYY/MM/DD HH:MM
_STAMP_FIXED = ((4, "/"), (7, "/"), (10, " "), (13, ":"), (16, ":"))
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _only(cells: Sequence[str], allowed: bytes, unit: str = "") -> str | None:
    """The cells as lines of one text, `unit` taken out where it ends a cell, if all `allowed`.

    None when a cell holds a line break, `unit` other than at its end, or a
    byte not in `allowed` (non-ASCII included).
    """
    text = "\n".join(cells) + "\n"
    if text.count("\n") != len(cells):
        return None
    if any(b in text for b in _AROUND_LINE_BREAK[:3]):  # blanks after a cell, a CRLF line end
        text = "\n".join(c.strip(" \t\r") for c in cells) + "\n"
    if unit:
        found = text.count(unit)
        if found and found != text.count(unit + "\n"):
            return None
        text = text.replace(unit, " ")
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    return None if raw.translate(None, allowed) else text


def numbers(cells: Sequence[str], unit: str = "") -> FloatArray | None:
    """Plain numbers, each optionally followed by `unit`; None if any cell is anything else.

    Checked without a pattern per cell: the unit, where a cell has it, must end
    the cell; then, the units taken out, the text may hold only ASCII digits,
    `.`, `+`, `-`, `e`, `E`, blanks and the cells' line breaks. Of such cells
    Python's (and numpy's) `float` accepts exactly the numbers
    `[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][-+]?[0-9]+)?` with blanks around,
    what the cell reader accepts, and refuses the rest (`1 2`, `5e`, `+-1`,
    an empty cell).
    """
    text = _only(cells, _NUMBER_BYTES, unit)
    if text is None:
        return None
    parts = text.split("\n")[:-1]
    try:  # Python's float: a third of numpy's time on cells with blanks around
        return np.fromiter(map(float, parts), np.float64, len(parts))
    except ValueError:
        return None


def gpu_indices(cells: Sequence[str]) -> IntArray | None:
    """GPU indices up to MAX_GPU_INDEX; None if any cell is anything else (or above)."""
    text = _only(cells, _INDEX_BYTES)
    if text is None:
        return None
    parts = text.split("\n")[:-1]
    try:
        out = np.fromiter(map(int, parts), np.int64, len(parts))
    except (ValueError, OverflowError):
        return None
    return None if out.size and int(out.max()) > MAX_GPU_INDEX else out


def smi_stamps(cells: Sequence[str], tz: tzinfo) -> FloatArray | None:
    """nvidia-smi timestamps (local time in `tz`) to epoch seconds, as strptime would read them.

    Read as a matrix of characters: every cell `YYYY/MM/DD HH:MM:SS` with 0 or
    1-6 fraction digits, all of one width, each field a valid date and time.
    None when a cell is in another form or names no date (the cell reader
    says which).
    """
    n = len(cells)
    if n == 0:
        return np.zeros(0)
    text = "\n".join(cells) + "\n"
    if text[0] in _BLANKS or any(b in text for b in _AROUND_LINE_BREAK):
        text = "\n".join(c.strip(" \t\r") for c in cells) + "\n"
    width = text.index("\n")
    if width != _STAMP_WIDTH and not _STAMP_WIDTH + 2 <= width <= _STAMP_WIDTH + 7:
        return None
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    if len(raw) != n * (width + 1):
        return None
    chars = np.frombuffer(raw, dtype=np.uint8).reshape(n, width + 1)
    if not bool((chars[:, width] == ord("\n")).all()):
        return None
    return smi_stamp_matrix(chars[:, :width], tz)


def smi_stamp_matrix(chars: npt.NDArray[np.uint8], tz: tzinfo) -> FloatArray | None:
    """smi_stamps of cells given as an (n, width) matrix of their ASCII bytes, all one width.

    The date, hour and minute (the first 16 bytes) repeat over a minute of
    rows: they are checked and converted once per run of equal ones.
    """
    n, width = chars.shape
    if width != _STAMP_WIDTH and not _STAMP_WIDTH + 2 <= width <= _STAMP_WIDTH + 7:
        return None
    if n == 0:
        return np.zeros(0)
    new = np.empty(n, dtype=bool)
    new[0] = True
    head16 = np.ascontiguousarray(chars[:, :_MINUTE_WIDTH]).view(np.uint64)  # two words a row
    np.any(head16[1:] != head16[:-1], axis=1, out=new[1:])
    firsts = np.flatnonzero(new)
    minutes = minute_micros(chars[firsts])
    fixed = [*_STAMP_FIXED, *([(_STAMP_WIDTH, ".")] if width > _STAMP_WIDTH else [])]
    at_all = [k for k, _ in fixed if k >= _MINUTE_WIDTH]
    if minutes is None or not bool((chars[:, at_all] == _codes(fixed, at_all)).all()):
        return None
    tail = chars[:, [k for k in range(_MINUTE_WIDTH, width) if k not in at_all]].astype(np.int64)
    tail -= 48
    if bool(((tail < 0) | (tail > 9)).any()):
        return None
    second = tail[:, 0] * 10 + tail[:, 1]
    fraction = np.zeros(n, dtype=np.int64)
    for k in range(2, tail.shape[1]):
        fraction = fraction * 10 + tail[:, k]
    fraction *= 10 ** (6 - (tail.shape[1] - 2)) if tail.shape[1] > 2 else 0
    return stamps_s(minutes, firsts, second, fraction, tz)


def minute_micros(lead: npt.NDArray[np.uint8]) -> IntArray | None:
    """Microseconds since 1970 of the minutes `YYYY/MM/DD HH:MM` that begin the rows of `lead`.

    None when a row is not a date and time in that form.
    """
    at_lead = [k for k, _ in _STAMP_FIXED if k < _MINUTE_WIDTH]
    if not bool((lead[:, at_lead] == _codes(list(_STAMP_FIXED), at_lead)).all()):
        return None
    head = lead[:, [k for k in range(_MINUTE_WIDTH) if k not in at_lead]].astype(np.int64) - 48
    if bool(((head < 0) | (head > 9)).any()):
        return None
    return _civil_micros(np.concatenate([head, np.zeros((head.shape[0], 2), np.int64)], 1), 0)


def stamps_s(
    minutes: IntArray, firsts: IntArray, second: IntArray, fraction: IntArray, tz: tzinfo
) -> FloatArray | None:
    """Epoch seconds of rows: runs of one minute (starting at `firsts`) + second + microseconds.

    None when a second is above 59.
    """
    if bool((second > 59).any()):
        return None
    runs = np.diff(np.append(firsts, second.size))
    micros = np.repeat(minutes, runs) + second * 1_000_000 + fraction
    offset = _offsets_s(micros, tz)
    return np.asarray((micros - offset * 1_000_000) / 1e6, dtype=np.float64)


def _codes(fixed: list[tuple[int, str]], at: list[int]) -> npt.NDArray[np.uint8]:
    chars = dict(fixed)
    return np.array([ord(chars[k]) for k in at], dtype=np.uint8)


def _civil_micros(d: IntArray, fraction_digits: int) -> IntArray | None:
    """Microseconds since 1970 of naive times given as digit columns; None if one is no time."""

    def num(first: int, count: int) -> IntArray:
        out = np.zeros(d.shape[0], dtype=np.int64)
        for k in range(first, first + count):
            out = out * 10 + d[:, k]
        return out

    year, month, day = num(0, 4), num(4, 2), num(6, 2)
    hour, minute, second = num(8, 2), num(10, 2), num(12, 2)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_ok = (month >= 1) & (month <= 12)
    days_in = _DAYS_IN_MONTH[np.clip(month, 1, 12) - 1] + ((month == 2) & leap)
    ok = (year >= 1) & month_ok & (day >= 1) & (day <= days_in)
    ok &= (hour <= 23) & (minute <= 59) & (second <= 59)
    if not bool(ok.all()):
        return None
    # Days from the civil date (proleptic Gregorian, as datetime), H. Hinnant's algorithm.
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    days = era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468
    micros: IntArray = (((days * 24 + hour) * 60 + minute) * 60 + second) * 1_000_000
    if fraction_digits > 0:
        micros += num(14, fraction_digits) * 10 ** (6 - fraction_digits)
    return micros


def _offsets_s(micros: IntArray, tz: tzinfo) -> IntArray:
    """The zone's UTC offset (whole seconds) for each naive local time, as `replace(tzinfo)`.

    Asked once per run of rows in one minute (a capture is in time order), or
    once per distinct minute when the rows jump about.
    """
    minute = micros // 60_000_000
    starts = np.flatnonzero(np.diff(minute)) + 1
    if starts.size < 4096:
        firsts = np.concatenate([[0], starts])
        runs = np.diff(np.concatenate([firsts, [minute.size]]))
        return np.repeat(_zone_offsets(minute[firsts], tz), runs)
    uniq, inverse = np.unique(minute, return_inverse=True)
    return _zone_offsets(uniq, tz)[inverse.reshape(-1)]


def _zone_offsets(minutes: IntArray, tz: tzinfo) -> IntArray:
    offsets = np.empty(minutes.size, dtype=np.int64)
    epoch = datetime(1970, 1, 1)
    for k, m in enumerate(minutes.tolist()):
        local = epoch + timedelta(minutes=m)
        off = local.replace(tzinfo=tz).utcoffset()
        offsets[k] = 0 if off is None else round(off.total_seconds())
    return offsets


def metric_ok(metric: Metric, values: FloatArray, *, integer: bool = False) -> bool:
    """Every value finite (or NaN: absent) and inside the metric's range (as check_value).

    `integer`: whole numbers only (a trace's bitmask).
    """
    if bool(np.isinf(values).any()):
        return False
    spec = METRICS[metric]
    with np.errstate(invalid="ignore"):
        if spec.lower is not None and bool((values < spec.lower).any()):
            return False
        if spec.upper is not None and bool((values > spec.upper * RATIO_SLACK).any()):
            return False
    return not integer or bool((np.isnan(values) | (values == np.trunc(values))).all())


def checked(
    metric: Metric,
    values: FloatArray,
    line_of: Callable[[int], int],
    *,
    path: str,
    field: str,
    nan_is_absent: bool = True,
) -> None:
    """check_value's error for the first value out of range or not finite, if any.

    `line_of(j)` is the line of value j; NaN means absent unless `nan_is_absent` is False.
    """
    if metric_ok(metric, values) and (nan_is_absent or not bool(np.isnan(values).any())):
        return
    rows = np.flatnonzero(~np.isnan(values)) if nan_is_absent else np.arange(values.size)
    for j in rows.tolist():
        check_value(metric, float(values[j]), path=path, line=line_of(j), field=field)


class FirstError:
    """The errors met converting a run's columns: the one a row-by-row reader meets first wins.

    That is the lowest line, and on one line the lowest position (the column's
    place in the row, or a row-level check placed before the columns).
    """

    def __init__(self) -> None:
        self._errors: list[tuple[int, int, InputError]] = []

    def add(self, position: int, error: InputError) -> None:
        self._errors.append((error.line or 0, position, error))

    @contextmanager
    def column(self, position: int) -> Iterator[None]:
        """Convert one column inside: its InputError is kept, and the other columns go on."""
        try:
            yield
        except InputError as e:
            self.add(position, e)

    def raise_first(self) -> None:
        if self._errors:
            raise min(self._errors, key=lambda e: e[:2])[2]
