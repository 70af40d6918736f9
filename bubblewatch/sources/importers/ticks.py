"""Which GPU a row is, in a capture that does not say: nvidia-smi without an index column.

`nvidia-smi --query-gpu=timestamp,... -lms N` prints every GPU once per tick,
in index order, each row stamped when that GPU was read. Rows of one tick are
milliseconds apart (not always equal: the query of 8 GPUs takes a few ms, a
slow one tens of ms); ticks are the sampling period apart. So the GPU count is
the usual number of rows in a burst, and row k of a burst is GPU k.

Bursts are cut where the gap between rows is long: the threshold splits the
gaps' log-durations into two groups (Otsu's method). A tick that a slow query
cut in two (7 + 1 rows) leaves the mode alone and is joined again. A tick
with rows lost or added (a GPU not read, a line cut off) cannot say which
row is which GPU: its rows get -1 and are left out, where counting rows
across the capture (GPU k mod n) would give every later row to the wrong
GPU. A capture whose gaps do not fall into two clearly separated groups is
one GPU; with a GPU count given that its ticks do not show, row k is GPU k
mod n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Within-tick gaps and the sampling period must differ by at least this factor.
MIN_SEPARATION = 4.0
_FLOOR_S = 1e-4  # equal timestamps (0 s apart) count as 0.1 ms


def _burst_starts(t_s: FloatArray) -> IntArray | None:
    """First row of each burst of rows (a tick); None where the gaps show no ticks."""
    gaps = np.diff(np.asarray(t_s, dtype=np.float64))
    if gaps.size < 3:
        return None
    logs = np.log(np.maximum(gaps, _FLOOR_S))
    threshold = _otsu(logs)
    small, large = logs[logs <= threshold], logs[logs > threshold]
    if small.size == 0 or large.size == 0:
        return None
    if float(np.median(large) - np.median(small)) < np.log(MIN_SEPARATION):
        return None
    out: IntArray = np.concatenate(([0], np.flatnonzero(logs > threshold) + 1))
    return out


def gpu_count_from_sampling(t_s: FloatArray) -> int:
    """The number of GPUs per tick, judged from the timing of the rows (1 if unclear)."""
    starts = _burst_starts(t_s)
    if starts is None:
        return 1
    sizes = np.diff(np.concatenate((starts, [t_s.shape[0]])))
    values, counts = np.unique(sizes, return_counts=True)
    return int(values[np.argmax(counts)])


def gpu_positions(t_s: FloatArray, segment_starts: Sequence[int], n_gpus: int | None) -> IntArray:
    """GPU index of each row: its position within its tick (-1: a tick of the wrong size).

    A segment starts where the capture restarted (a header printed again).
    `n_gpus` None: judged from the sampling (gpu_count_from_sampling).
    """
    n_rows = int(np.asarray(t_s).shape[0])
    starts = sorted({0, *(s for s in segment_starts if 0 < s < n_rows)})
    ends = [*starts[1:], n_rows]
    out = np.zeros(n_rows, dtype=np.int64)
    for a, b in zip(starts, ends, strict=True):
        judged = gpu_count_from_sampling(t_s[a:b])
        n = max(n_gpus if n_gpus is not None else judged, 1)
        # Ticks of another size than the count given: the user's count, row k is GPU k mod n.
        bursts = _burst_starts(t_s[a:b]) if n > 1 and judged == n else None
        if bursts is None:
            out[a:b] = np.arange(b - a, dtype=np.int64) % n
        else:
            out[a:b] = _positions_in_ticks(bursts, b - a, n)
    return out


def _positions_in_ticks(bursts: IntArray, n_rows: int, n: int) -> IntArray:
    """Row k of a tick of n rows is GPU k; a tick cut in two is joined; other rows get -1.

    Ticks of n rows, most of them, at once; a tick of another size joins the
    ones after it (_join) until n rows. Joining never takes in a tick of n
    rows (its rows and the first tick's would be more than n), so each run
    of other ticks is joined on its own.
    """
    sizes = np.diff(np.concatenate((bursts, [n_rows])))
    regular = sizes == n
    tick = np.repeat(np.arange(sizes.size), sizes)  # each row's tick
    out = np.arange(n_rows, dtype=np.int64) - bursts[tick]
    out[~regular[tick]] = -1
    odd = np.flatnonzero(~regular)
    if odd.size:
        runs = np.split(odd, np.flatnonzero(np.diff(odd) > 1) + 1)
        for run in runs:
            _join(out, bursts[run], sizes[run].tolist(), n)
    return out


def _join(out: IntArray, bursts: IntArray, sizes: list[int], n: int) -> None:
    """Ticks of other sizes than n, in a row: those that add up to n rows read as one tick."""
    i = 0
    while i < len(sizes):
        j, total = i, 0
        while j < len(sizes) and total < n:
            total += sizes[j]
            j += 1
        if total == n:
            out[bursts[i] : bursts[i] + n] = np.arange(n)
            i = j
        else:
            i += 1


def _otsu(x: FloatArray) -> float:
    """The threshold that best splits `x` into two groups (largest between-group variance)."""
    s = np.sort(x)
    n = s.size
    csum = np.cumsum(s)
    k = np.arange(1, n)  # split after element k-1
    w0, w1 = k / n, (n - k) / n
    m0 = csum[:-1] / k
    m1 = (csum[-1] - csum[:-1]) / (n - k)
    between = w0 * w1 * (m0 - m1) ** 2
    # Equal neighbours cannot be split apart: only cut between distinct values.
    between = np.where(np.diff(s) > 0, between, -1.0)
    i = int(np.argmax(between))
    return float(0.5 * (s[i] + s[i + 1])) if between[i] >= 0 else float(s[-1])
