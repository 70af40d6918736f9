"""Whole columns of CSV text to numpy arrays at once, for the importers' column converters.

Each function takes the cells of one column of a block and returns an array,
or None when a cell is not in the plain form it expects; the importer then
reads that column cell by cell with its cell readers, which give the same
value for what these accept and name the line and field of a bad cell.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo

import numpy as np
import numpy.typing as npt

from bubblewatch.limits import MAX_GPU_INDEX
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.importers._common import RATIO_SLACK, check_value

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# One cell per line, matched line by line (a pattern repeated over the lines would
# backtrack without end on a bad cell).
_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_SPACE = "[ \t]*"
_INT_CELL = re.compile(rf"^{_SPACE}[0-9]{{1,9}}{_SPACE}$", re.MULTILINE)
# nvidia-smi's `YYYY/MM/DD HH:MM:SS[.ffffff]`, as datetime.strptime reads it with two digits.
_SMI_STAMP = re.compile(
    rf"^{_SPACE}[0-9]{{4}}/[0-9]{{2}}/[0-9]{{2}} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"
    rf"(?:\.[0-9]{{1,6}})?{_SPACE}$",
    re.MULTILINE,
)
_FIRST_DAY = np.datetime64("0001-01-01", "us")
_UNIT_CELLS: dict[str, re.Pattern[str]] = {}


def _unit_cells(unit: str) -> re.Pattern[str]:
    """Cells holding a number, optionally followed by `unit` (nothing else)."""
    pat = _UNIT_CELLS.get(unit)
    if pat is None:
        tail = f"(?:{_SPACE}{re.escape(unit)})?" if unit else ""
        pat = re.compile(rf"^{_SPACE}{_NUM}{tail}{_SPACE}$", re.MULTILINE)
        _UNIT_CELLS[unit] = pat
    return pat


def _all_match(pattern: re.Pattern[str], cells: Sequence[str]) -> str | None:
    """The cells as lines of one text when every one matches `pattern`, else None."""
    text = "\n".join(cells)
    if text.count("\n") != len(cells) - 1 or len(pattern.findall(text)) != len(cells):
        return None
    return text


def numbers(cells: Sequence[str], unit: str = "") -> FloatArray | None:
    """Plain numbers, each optionally followed by `unit`; None if any cell is anything else."""
    text = _all_match(_unit_cells(unit), cells)
    if text is None:
        return None
    if unit:
        text = text.replace(unit, " ")
    try:
        return np.array(text.split(), dtype=np.float64)
    except (ValueError, OverflowError):
        return None


def gpu_indices(cells: Sequence[str]) -> IntArray | None:
    """GPU indices up to MAX_GPU_INDEX; None if any cell is anything else (or above)."""
    text = _all_match(_INT_CELL, cells)
    if text is None:
        return None
    out = np.array(text.split(), dtype=np.int64)
    return None if out.size and int(out.max()) > MAX_GPU_INDEX else out


def smi_stamps(cells: Sequence[str], tz: tzinfo) -> FloatArray | None:
    """nvidia-smi timestamps (local time in `tz`) to epoch seconds, as strptime would read them.

    None when a cell is in another form or names no date (the cell reader says which).
    """
    text = _all_match(_SMI_STAMP, cells)
    if text is None:
        return None
    iso = text.replace("/", "-").split("\n")
    try:
        stamps = np.array([c.strip().replace(" ", "T") for c in iso], dtype="datetime64[us]")
    except ValueError:
        return None
    if stamps.size and stamps.min() < _FIRST_DAY:  # numpy reads year 0, strptime does not
        return None
    micros = stamps.astype(np.int64)
    offset = _offsets_s(micros, tz)
    return np.asarray((micros - offset * 1_000_000) / 1e6, dtype=np.float64)


def _offsets_s(micros: IntArray, tz: tzinfo) -> IntArray:
    """The zone's UTC offset (whole seconds) for each naive local time, as `replace(tzinfo)`."""
    minute = micros // 60_000_000
    uniq, inverse = np.unique(minute, return_inverse=True)
    offsets = np.empty(uniq.size, dtype=np.int64)
    epoch = datetime(1970, 1, 1)
    for k, m in enumerate(uniq.tolist()):
        local = epoch + timedelta(minutes=m)
        off = local.replace(tzinfo=tz).utcoffset()
        offsets[k] = 0 if off is None else round(off.total_seconds())
    return offsets[inverse.reshape(-1)]


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
