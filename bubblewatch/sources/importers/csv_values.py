"""Column converters for the generic CSV importer: whole columns of text to numpy arrays.

Each converter takes one column (a list of cells) and the line number of
each cell, and either returns an array or raises an InputError naming the
file, the line and the field of the first cell it cannot read. Absent cells
(empty, `N/A`, `[Not Supported]`, `nan`, ...) become NaN: absent, never zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime, tzinfo

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.limits import gpu_index
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.sources.importers._common import RATIO_SLACK, bitmask

FloatArray = npt.NDArray[np.float64]

ABSENT = frozenset(
    {"", "n/a", "na", "nan", "none", "null", "-", "[n/a]", "[not supported]", "not supported"}
)
_NUMBER_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*[A-Za-z%/]*\s*$")
_TRAILING_INT = re.compile(r"(\d+)\s*$")
_SMI_TIME = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")
# Epoch magnitudes: seconds until ~5000 AD stay below 1e11; ms, us and ns lie above.
_EPOCH_SCALES = ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3))


def is_absent(cell: str) -> bool:
    return cell.strip().lower() in ABSENT or (cell.startswith("[") and cell.endswith("]"))


def numbers(cells: Sequence[str], lines: Sequence[int], *, path: str, field: str) -> FloatArray:
    """Floats (a trailing unit such as `W` or `%` and hex bitmasks allowed); absent -> NaN."""
    try:
        return np.array([float(c) if c.strip() else math.nan for c in cells], dtype=np.float64)
    except ValueError:
        pass  # units, absent markers or hex: one cell at a time
    out = np.empty(len(cells), dtype=np.float64)
    for i, c in enumerate(cells):
        out[i] = _number(c, path=path, line=lines[i], field=field)
    return out


def _number(cell: str, *, path: str, line: int, field: str) -> float:
    text = cell.strip()
    if is_absent(text):
        return math.nan
    if text[:2] in ("0x", "0X"):
        mask = bitmask(text)
        if mask is not None:
            return mask
    m = _NUMBER_UNIT.match(text)
    if m is None:
        raise InputError(f"must be a number, got {cell!r}", path=path, line=line, field=field)
    return float(m.group(1))


def checked(
    metric: Metric, values: FloatArray, lines: Sequence[int], *, path: str, field: str
) -> FloatArray:
    """`values` if every finite one lies in the metric's range, else an error at the first."""
    spec = METRICS[metric]
    bad = np.zeros(values.shape, dtype=bool)
    finite = np.isfinite(values)
    bad |= np.isinf(values)
    if spec.lower is not None:
        bad |= finite & (values < spec.lower)
    if spec.upper is not None:
        bad |= finite & (values > spec.upper * RATIO_SLACK)
    if bad.any():
        i = int(np.argmax(bad))
        lo = "" if spec.lower is None else f"{spec.lower:g}"
        hi = "" if spec.upper is None else f"{spec.upper:g}"
        raise InputError(
            f"must be in [{lo}, {hi}] {spec.unit} as {metric.value}, got {float(values[i]):g} "
            "(after unit conversion)",
            path=path,
            line=lines[i],
            field=field,
        )
    return values


def times(
    cells: Sequence[str], lines: Sequence[int], *, tz: tzinfo, path: str, field: str
) -> tuple[FloatArray, str]:
    """Seconds since the epoch, and how they were written.

    Numbers are epoch seconds (or ms, us, ns by magnitude; small numbers are
    seconds from the start); text is ISO 8601 (`2025-09-24T03:48:33.493Z`,
    `2025-07-27 00:47:09.120`) or nvidia-smi's `2025/07/27 00:22:27.858`.
    Naive times are in `tz`.
    """
    try:
        raw = np.array([float(c) for c in cells], dtype=np.float64)
    except ValueError:
        return _text_times(cells, lines, tz=tz, path=path, field=field)
    bad = ~np.isfinite(raw)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"must be a time, got {cells[i]!r}", path=path, line=lines[i], field=field)
    big = float(np.median(np.abs(raw))) if raw.size else 0.0
    for limit, scale in _EPOCH_SCALES:
        if big >= limit:
            return (
                raw * scale,
                f"epoch ({'ns' if scale == 1e-9 else 'us' if scale == 1e-6 else 'ms'})",
            )
    return raw, "epoch seconds" if big >= 1e8 else "seconds from the start"


def _text_times(
    cells: Sequence[str], lines: Sequence[int], *, tz: tzinfo, path: str, field: str
) -> tuple[FloatArray, str]:
    cache: dict[str, float] = {}
    out = np.empty(len(cells), dtype=np.float64)
    kind = ""
    for i, c in enumerate(cells):
        text = c.strip()
        t = cache.get(text)
        if t is None:
            parsed = _parse_text_time(text, tz)
            if parsed is None:
                raise InputError(
                    f"cannot read time {c!r} (expected epoch seconds, ISO 8601 like "
                    "2025-09-24T03:48:33.493Z, or nvidia-smi's 2025/09/24 03:48:33.493)",
                    path=path,
                    line=lines[i],
                    field=field,
                )
            t, kind = parsed
            cache[text] = t
        out[i] = t
    return out, kind


def _parse_text_time(text: str, tz: tzinfo) -> tuple[float, str] | None:
    if "/" in text[:10]:
        for fmt in _SMI_TIME:
            try:
                dt = datetime.strptime(text, fmt)
            except ValueError:
                continue
            return dt.replace(tzinfo=tz).timestamp(), "nvidia-smi"
        return None
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        dt = datetime.fromisoformat(iso)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)
    return dt.timestamp(), "ISO 8601"


def gpu_ids(cells: Sequence[str], lines: Sequence[int], *, path: str, field: str) -> list[str]:
    """GPU keys: the cell's trailing integer (`3`, `GPU 3`, `cuda:3`) or the text itself."""
    out = []
    for i, c in enumerate(cells):
        text = c.strip()
        if is_absent(text):
            raise InputError(
                "must name the GPU (an index, 'GPU 3', or a UUID), got an empty cell",
                path=path,
                line=lines[i],
                field=field,
            )
        m = None if text.startswith("GPU-") else _TRAILING_INT.search(text)
        if m is None:
            out.append(text)
        else:
            out.append(str(gpu_index(m.group(1), path=path, line=lines[i], field=field)))
    return out
