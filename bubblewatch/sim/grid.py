"""Binning of time intervals onto the timeline's uniform grid, vectorised.

`cell_means` returns, per cell, the mean over the cell of a function that is
`weight_i` on [start_i, end_i) and 0 elsewhere (overlapping intervals add up).
It uses the integral F(x) = sum_i w_i * (clip(x - s_i, 0) - clip(x - e_i, 0)),
evaluated at every cell edge from sorted cumulative sums: no Python loop.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def _ramp_integral(points: FloatArray, weights: FloatArray, edges: FloatArray) -> FloatArray:
    """sum_i w_i * max(edge - p_i, 0) for every edge."""
    order = np.argsort(points, kind="stable")
    p = points[order]
    w = weights[order]
    cw = np.concatenate(([0.0], np.cumsum(w)))
    cwp = np.concatenate(([0.0], np.cumsum(w * p)))
    k = np.searchsorted(p, edges, side="right")
    return edges * cw[k] - cwp[k]


def cell_means(
    start_s: FloatArray,
    end_s: FloatArray,
    weight: FloatArray | float,
    n_cells: int,
    dt_s: float,
    *,
    first_cell: int = 0,
) -> FloatArray:
    """Mean over each of `n_cells` cells of length `dt_s` of the weighted interval indicator.

    The cells are `first_cell`, `first_cell + 1`, ... (a part of a longer timeline).
    """
    start = np.asarray(start_s, dtype=np.float64)
    end = np.asarray(end_s, dtype=np.float64)
    if start.size == 0:
        return np.zeros(n_cells)
    w = np.broadcast_to(np.asarray(weight, dtype=np.float64), start.shape)
    # Shift to cell units' origin so magnitudes stay small (better cancellation).
    edges = (first_cell + np.arange(n_cells + 1, dtype=np.float64)) * dt_s
    integral = _ramp_integral(start, w, edges) - _ramp_integral(end, w, edges)
    return np.diff(integral) / dt_s
