"""Do the GPUs take turns? Layer-split model parallelism seen without a topology.

One process that splits a model layer-wise over its GPUs (Transformers or
Accelerate `device_map`, llama.cpp's layer split) runs each token through
GPU 0, 1, ..., N-1 in turn: a pipeline with one micro-batch. At NVML rates
the turns within a token are faster than a sample, so the GPUs rise and
fall together with the requests, like data-parallel replicas; what tells
them apart is that their busy periods do not overlap:

- while the job works, one GPU's busy share is high when the others' is low:
  the zero-lag correlation of their fluctuations is negative. In-phase
  replicas (DP, TP) correlate positively, independent jobs near zero;
- the busy shares add up to about one GPU (only one computes at a time),
  where replicas add up to as many GPUs as are busy.

Statistic: T = minus (N - 1) times the mean over pairs of the N GPUs'
fluctuations of their lowest correlation within one sample of lag 0 (each
GPU's utilization.gpu covers its own sampling period, so the exchange shows
at lag 0 or next to it), over the samples where any of them works (loading
and idle gaps between requests left out; trend over `trend_window_s`
removed). T is about 1 when the shares exchange perfectly (N series summing
to a constant correlate -1/(N-1) on average). Null
model: the same series, each circularly shifted by a random offset, as for
the stagger between groups (stagger.py), computed from the circular
cross-correlations (every pair in one inverse transform) in a gather per
lag and surrogate. Significant at `alpha`,
`min_effect` above the null's median, steady over chunks of the series (all
but one of three or four, both of two; asked only of a T beyond chance), and with a
busy sum of at most `max_busy_sum`. A busy sum above it rules turn-taking out before any
surrogate is drawn: the test then gives the observed T alone (from two
products of the rows), p = 1 and no surrogates.

The order of the turns comes from the starts and ends of the bursts of work
(a request's first token reaches GPU s+1 after GPU s; its last leaves it
after): per GPU, the sum over the idle gaps of the delay of its first busy
sample after the gap and of its last busy sample before the gap (counted
from 5 s before); ties keep GPU order. Without an idle gap in the window the
order is the GPUs' and not `ordered`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.lag import fluctuations, pair_correlations
from bubblewatch.detect.reductions import median
from bubblewatch.detect.stagger import shift_offsets

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_SEED = 0x7124E
BUSY_LEVEL = 0.05  # a GPU at or below this occupancy runs nothing that counts
MIN_POINTS = 200  # fewer working samples cannot show turn-taking
CHUNK_POINTS = 100
MIN_IDLE_GAP_S = 0.5
# Each GPU reads utilization.gpu over its own sampling period: a turn shows at lag 0 or
# one sample either side.
LAGS = np.array([-1, 0, 1])  # all GPUs idle this long separate two bursts of work


@dataclass(frozen=True)
class TurnTest:
    """Turn-taking statistic, its p-value under the shift null, the busy sum and the order.

    `n_surrogates` 0: no null was drawn (too little work, or the busy sum rules
    turn-taking out); `p_value` is then 1 and `excess` 0.
    """

    statistic: float
    p_value: float
    n_surrogates: int
    significant: bool
    excess: float = 0.0
    busy_sum: float | None = None  # mean over working samples of the GPUs' summed occupancy
    busy_sum_sigma: float = 0.0  # its spread over the chunks of the series
    order: tuple[int, ...] = ()  # row indices in turn order
    ordered: bool = False  # whether bursts of work gave the order (else row order)
    reason: str = ""


def turn_taking_test(
    occ: FloatArray,
    step_s: float,
    *,
    trend_window_s: float,
    n_surrogates: int,
    alpha: float,
    min_effect: float,
    max_busy_sum: float,
) -> TurnTest:
    """Test rows of `occ` (n_gpus, n_steps), one per GPU, for busy periods that take turns."""
    x = np.where(np.isfinite(occ), occ, 0.0)
    g = x.shape[0]
    working = x.max(axis=0) > BUSY_LEVEL
    n = int(working.sum())
    if g < 2 or n < MIN_POINTS:
        return TurnTest(0.0, 1.0, 0, False, reason=f"{n} working samples (needs {MIN_POINTS})")
    w = x[:, working]
    if np.any(w.mean(axis=1) <= BUSY_LEVEL / 2):
        return TurnTest(0.0, 1.0, 0, False, reason="a GPU takes no part in the work")
    busy_sum = float(w.sum(axis=0).mean())
    fl = fluctuations(w, step_s, trend_window_s)
    n_chunks = int(np.clip(n // CHUNK_POINTS, 2, 4))
    chunks = np.array_split(np.arange(n), n_chunks)
    sums = [float(w[:, chunk].sum(axis=0).mean()) for chunk in chunks]
    spread = float(np.std(sums))
    order, ordered = turn_order(x, step_s)
    if busy_sum > max_busy_sum:
        # Significance needs the busy sum within max_busy_sum: no null can change that, so
        # none is drawn (replicas of many GPUs, where the nulls' transforms cost the most).
        stat = observed_statistic(fl)
        why = (
            f"no turn-taking: busy sum {busy_sum:.2f} GPU, above {max_busy_sum:.2f} "
            f"(turn-taking {stat:.2f}, not tested against chance)"
        )
        return TurnTest(stat, 1.0, 0, False, 0.0, busy_sum, spread, order, ordered, why)
    offsets = shift_offsets(_SEED, n_surrogates, g)
    stat, null = _statistic(fl, offsets)
    p = float((1 + np.sum(null >= stat)) / (1 + n_surrogates))
    excess = stat - median(null)
    beyond_chance = p <= alpha and excess >= min_effect
    # Steadiness over the chunks matters only beyond chance (their nulls cost as the whole's).
    steady = beyond_chance and _steady(fl, chunks, offsets)
    significant = beyond_chance and steady
    unsteady = "" if steady or not beyond_chance else ", not steady"
    why = (
        f"busy periods of {g} GPUs do not overlap (turn-taking {stat:.2f}, {excess:.2f} above "
        f"chance, p = {p:.3f}; busy sum {busy_sum:.2f} GPU)"
        if significant
        else f"no turn-taking beyond chance (turn-taking {stat:.2f}, {excess:.2f} above chance, "
        f"p = {p:.3f}, busy sum {busy_sum:.2f}{unsteady})"
    )
    return TurnTest(
        stat, p, n_surrogates, significant, excess, busy_sum, spread, order, ordered, why
    )


def _steady(fl: FloatArray, chunks: list[IntArray], offsets: IntArray) -> bool:
    """Whether T beats its null's 90th percentile in all chunks but one (both of two)."""
    beaten = 0
    for chunk in chunks:
        s_c, null_c = _statistic(fl[:, chunk], offsets)
        beaten += int(s_c > float(np.quantile(null_c, 0.9)))
    return beaten >= len(chunks) - (1 if len(chunks) >= 3 else 0)


def _unit_rows(x: FloatArray) -> FloatArray | None:
    """Each row less its mean, scaled to unit norm; None where a row is flat."""
    z = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((z * z).sum(axis=1))
    if np.any(norm <= 1e-12):
        return None
    unit: FloatArray = z / norm[:, None]
    return unit


def observed_statistic(x: FloatArray) -> float:
    """Observed T alone, from two products of the rows (lags 0 and 1; lag -1 is 1 transposed).

    What `_statistic` reads off the circular correlations, to float rounding.
    """
    z = _unit_rows(x)
    if z is None:
        return 0.0
    at_0 = z @ z.T
    at_1 = z @ np.roll(z, -1, axis=1).T  # at_1[i, j] = sum_t z_i[t] z_j[(t + 1) % n]
    g = int(x.shape[0])
    first, second = np.triu_indices(g, 1)
    least = np.minimum.reduce([at_1[second, first], at_0[first, second], at_1[first, second]])
    return (g - 1) * float(np.mean(-least))


def _statistic(x: FloatArray, offsets: IntArray) -> tuple[float, FloatArray]:
    """Observed T and its surrogate values (see the module docstring)."""
    g, n = x.shape
    z = _unit_rows(x)
    if z is None:
        return 0.0, np.zeros(offsets.shape[0])
    margin = max(2, n // 50)  # a shift this close to none keeps the alignment
    first, second = np.triu_indices(g, 1)  # the pairs, (0, 1), (0, 2), ..., (g - 2, g - 1)
    c = pair_correlations(z)  # c[pair, L]
    observed = -c[:, LAGS % n].min(axis=1)
    delta = (offsets[:, second] - offsets[:, first]) % n  # (surrogates, pairs)
    near = (delta < margin) | (delta > n - margin)
    delta = np.where(near, (delta + n // 2) % n, delta)
    # The least c over LAGS around each surrogate's shift: a gather per lag.
    pairs = np.arange(c.shape[0])[None, :]
    least = np.minimum.reduce([c[pairs, (delta + lag) % n] for lag in LAGS.tolist()])
    null = np.zeros(offsets.shape[0])
    for i in range(g - 1):  # summed a first GPU at a time, as the pairs come
        null += -least[:, first == i].sum(axis=1)
    return (g - 1) * float(np.mean(observed)), (g - 1) * null / observed.size


def turn_order(x: FloatArray, step_s: float) -> tuple[tuple[int, ...], bool]:
    """Rows in the order bursts of work reach them (first busy sample late, last one early)."""
    g, n = x.shape
    busy = x > BUSY_LEVEL
    working = busy.any(axis=0)
    gap = max(1, round(MIN_IDLE_GAP_S / step_s))
    idx = np.flatnonzero(working)
    if idx.size == 0:
        return tuple(range(g)), False
    breaks = np.flatnonzero(np.diff(idx) > gap)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    ends = np.concatenate([idx[breaks], [idx[-1]]])
    window = max(2, round(5.0 / step_s))  # look this far into a burst for its first turns
    pos = np.zeros(g)
    counted = 0
    for a, b in zip(starts, ends, strict=True):
        # Only edges next to an idle gap count (not the window's own start or end).
        if a > gap and a + window <= n:
            head = busy[:, a : a + window]
            if head.any(axis=1).all():
                pos += head.argmax(axis=1)
                counted += 1
        if b < n - 1 - gap and b - window + 1 >= 0:
            tail = busy[:, b - window + 1 : b + 1]
            if tail.any(axis=1).all():
                pos += window - 1 - tail[:, ::-1].argmax(axis=1)
                counted += 1
    if counted == 0:
        return tuple(range(g)), False
    order = np.lexsort((np.arange(g), pos))
    return tuple(int(k) for k in order), bool(np.ptp(pos) > 0)
