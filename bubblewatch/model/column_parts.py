"""Parts of one GPU's columns laid end to end and put in time order: what builders share.

A part is a run of rows in arrival order: timestamps and, per metric, values
(NaN where a row lacks the metric). `merge_parts` concatenates the parts of a
GPU, filling a metric a part lacks with NaN, and sorts the rows by time with
a stable sort, so rows with the same time keep their arrival order (as sorting
row records by time did). A metric is kept if any part has a column for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from bubblewatch.model.metrics import Metric

FloatArray = npt.NDArray[np.float64]
Part = tuple[FloatArray, Mapping[Metric, FloatArray]]


def merge_parts(parts: Sequence[Part]) -> tuple[FloatArray, dict[Metric, FloatArray]]:
    """One GPU's parts as sorted columns (metrics in name order)."""
    if not parts:
        return np.zeros(0), {}
    metrics = sorted({m for _, v in parts for m in v}, key=lambda m: m.value)
    if len(parts) == 1:
        t, vals = parts[0]
        t = np.asarray(t, dtype=np.float64)
        values = {m: np.asarray(vals[m], dtype=np.float64) for m in metrics}
    else:
        t = np.concatenate([p[0] for p in parts]).astype(np.float64, copy=False)
        values = {}
        for m in metrics:
            values[m] = np.concatenate(
                [v[m] if m in v else np.full(len(pt), np.nan) for pt, v in parts]
            ).astype(np.float64, copy=False)
    if t.size > 1 and bool((t[1:] < t[:-1]).any()):
        order = np.argsort(t, kind="stable")
        t = t[order]
        values = {m: v[order] for m, v in values.items()}
    return t, values


def share_equal(arrays: list[FloatArray]) -> list[FloatArray]:
    """The arrays, each equal to its predecessor replaced by it (GPUs sampled together)."""
    out: list[FloatArray] = []
    for a in arrays:
        prev = out[-1] if out else None
        out.append(prev if prev is not None and np.array_equal(prev, a) else a)
    return out
