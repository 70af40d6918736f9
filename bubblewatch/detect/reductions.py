"""Medians and NaN-aware reductions that give numpy's values without importing numpy.ma.

`np.median` asks whether its result is a masked array, which imports numpy.ma
(about 15 ms) on the first call, and `np.nanmedian` of short rows runs through
numpy.ma. These do what numpy does: partition at the middle (and the last
place, where a NaN would sort), the mean of the middle one or two values, NaN
where there is a NaN (medians; the NaN-aware ones drop them first).
"""

from __future__ import annotations

import warnings

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def median(a: npt.ArrayLike) -> float:
    """`float(np.median(a))` of all the values."""
    return float(_median(np.asarray(a, dtype=np.float64).ravel(), axis=0))


def row_medians(a: FloatArray) -> FloatArray:
    """`np.median(a, axis=1)` of a 2-D array."""
    return np.asarray(_median(np.asarray(a, dtype=np.float64), axis=1), dtype=np.float64)


def nanmedian(a: npt.ArrayLike) -> float:
    """`float(np.nanmedian(a))`: the median of the values not NaN (NaN, warned, if none)."""
    x = np.asarray(a, dtype=np.float64).ravel()
    x = x[~np.isnan(x)]
    if not x.size:
        warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=2)
        return float("nan")
    return float(_median(x, axis=0))


def row_nanmedians(a: FloatArray) -> FloatArray:
    """`np.nanmedian(a, axis=1)` of a 2-D array, row by row (NaN, warned, for a row of NaN)."""
    return np.array([nanmedian(row) for row in np.asarray(a, dtype=np.float64)], dtype=np.float64)


def _median(a: FloatArray, axis: int) -> FloatArray:
    """numpy's `_median` for floats, without its masked-array check."""
    n = a.shape[axis]
    if n == 0:
        return np.asarray(np.median(a, axis=axis), dtype=np.float64)  # NaN, and numpy's warning
    half = n // 2
    kth = [half - 1, half, -1] if n % 2 == 0 else [half, -1]
    part = np.partition(a, kth, axis=axis)
    middle: list[slice] = [slice(None)] * part.ndim
    middle[axis] = slice(half - 1, half + 1) if n % 2 == 0 else slice(half, half + 1)
    out = part[tuple(middle)].mean(axis=axis)
    last = np.take(part, -1, axis=axis)  # a NaN sorts last: then the median is NaN
    return np.asarray(np.where(np.isnan(last), last, out), dtype=np.float64)


def nan_mean(a: FloatArray, *, axis: int) -> FloatArray:
    """Mean of the finite values of a 2-D array along `axis`; NaN where there are none."""
    ok = np.isfinite(a)
    count = ok.sum(axis=axis)
    filled = np.where(ok, a, 0.0)
    # Each sum runs along memory (axis 0: on the transposed copy), as numpy sums a
    # contiguous run (pairwise), whatever the array's layout.
    total = np.ascontiguousarray(filled.T if axis == 0 else filled).sum(axis=1)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.where(count > 0, total / count, np.nan), dtype=np.float64)


def nan_spread(a: FloatArray, *, axis: int) -> FloatArray:
    """Largest minus smallest finite value of a 2-D array along `axis`; NaN where there are none."""
    ok = np.isfinite(a)
    top = np.where(ok, a, -np.inf).max(axis=axis, initial=-np.inf)
    bottom = np.where(ok, a, np.inf).min(axis=axis, initial=np.inf)
    return np.asarray(np.where(ok.any(axis=axis), top - bottom, np.nan), dtype=np.float64)
