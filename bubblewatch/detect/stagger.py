"""Is there a stagger between GPU groups that chance cannot explain? A surrogate null model.

A pipeline's stages take turns: a change reaches stage s+1 a stage-time after
stage s, so the cross-correlation of two stages peaks away from lag 0 (and is
often negative at lag 0: one works while the other waits). Groups working in
phase (data or tensor parallel) peak at lag 0; independent jobs peak nowhere.

Statistic, for each pair of group signals (standardised fluctuations):
  s_ij = max over 1 <= |L| <= max_lag of c_ij(L)  -  max(c_ij(0), 0)
with c_ij the circular cross-correlation; S is the mean over pairs. The
effect is S above the null's median (shared host CPUs couple independent
jobs a little, so S alone is never quite zero).

Null model: the same groups, each circularly shifted by a random offset
(surrogates keep every series' own autocorrelation and spectrum and destroy
only their alignment). With the circular cross-correlation computed once (every
pair in one inverse transform), a shift of group j against group i is a shift
of c_ij, so each surrogate costs a few gathers. The p-value is
(1 + #{S_null >= S}) / (1 + n_surrogates). The random offsets come from a
fixed seed: the test is a pure function.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.lag import average_down, pair_correlations
from bubblewatch.detect.reductions import median

FloatArray = npt.NDArray[np.float64]

# Longer series are averaged down to this many points before the test.
MAX_POINTS = 4096
CHUNK_POINTS = 100  # the shortest chunk the steadiness check cuts a window into
_SEED = 0x57A66E


@dataclass(frozen=True)
class StaggerTest:
    """The stagger statistic, its p-value under the shift null, and the verdict."""

    statistic: float
    p_value: float
    n_surrogates: int
    significant: bool
    excess: float = 0.0  # statistic above the null's median: the effect size


def stagger_test(
    signals: FloatArray,
    step_s: float,
    *,
    max_lag_s: float,
    n_surrogates: int,
    alpha: float,
    min_effect: float,
) -> StaggerTest:
    """Test rows of `signals` (n_groups, n_steps) for a lagged coupling beyond chance.

    Besides the whole window, a pipeline's stagger is steady: cut into two to
    four chunks of CHUNK_POINTS or more, it must beat the 90th percentile of
    its null in every chunk but one (in both of two chunks): an episode, such
    as a checkpoint in which one rank writes while another works, does not
    make a pipeline. A window too short for two chunks shows no pipeline.
    """
    x = np.where(np.isfinite(signals), signals, 0.0)
    g, n = x.shape
    if g < 2 or n < 16:
        return StaggerTest(0.0, 1.0, 0, False)
    x, k = average_down(x, MAX_POINTS)
    step_s, n = step_s * k, x.shape[1]
    offsets = shift_offsets(_SEED, n_surrogates, g)
    stat, null = _statistic(x, step_s, max_lag_s, offsets)
    p = float((1 + np.sum(null >= stat)) / (1 + n_surrogates))
    excess = stat - median(null)
    # Steadiness needs two chunks at least: shorter windows (60 s at 1 s sampling) cannot
    # show a pipeline without a topology.
    n_chunks = int(np.clip(n // CHUNK_POINTS, 1, 4))
    beaten = 0
    for chunk in np.array_split(np.arange(n), n_chunks) if n_chunks > 1 else ():
        s_c, null_c = _statistic(x[:, chunk], step_s, max_lag_s, offsets)
        beaten += int(s_c > float(np.quantile(null_c, 0.9)))
    # Two chunks must both show it; of three or four, one may miss.
    steady = n_chunks > 1 and beaten >= n_chunks - (1 if n_chunks >= 3 else 0)
    significant = p <= alpha and excess >= min_effect and steady
    return StaggerTest(stat, p, n_surrogates, significant, excess)


@functools.lru_cache(maxsize=32)
def shift_offsets(seed: int, n_surrogates: int, n_series: int) -> npt.NDArray[np.int64]:
    """Each surrogate's random circular shift of each series, from a fixed seed (read-only).

    The same for every window of a recording, so drawn once per shape.
    """
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, 1 << 30, size=(n_surrogates, n_series))
    offsets.setflags(write=False)
    return offsets


def _statistic(
    x: FloatArray, step_s: float, max_lag_s: float, offsets: npt.NDArray[np.int64]
) -> tuple[float, FloatArray]:
    """Observed S and its surrogate values, for rows of x (see the module docstring)."""
    g, n = x.shape
    x = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=1))
    live = norm > 1e-12
    if live.sum() < 2:
        return 0.0, np.zeros(offsets.shape[0])
    x = x[live] / norm[live, None]
    offsets = offsets[:, live] % n
    g = x.shape[0]
    max_lag = int(min(max(1, round(max_lag_s / step_s)), max(1, n // 8)))
    margin = 2 * max_lag + 1
    first, second = np.triu_indices(g, 1)  # the pairs, (0, 1), (0, 2), ..., (g - 2, g - 1)
    c = pair_correlations(x)  # c[pair, L], circular
    win = _window_max(c, max_lag)
    obs = _pair_stat(c, win, max_lag, np.zeros((1, c.shape[0]), dtype=np.int64))[0]
    delta = (offsets[:, second] - offsets[:, first]) % n  # (surrogates, pairs)
    near = (delta < margin) | (delta > n - margin)
    delta = np.where(near, (delta + n // 2) % n, delta)
    s = _pair_stat(c, win, max_lag, delta)
    null = np.zeros(offsets.shape[0])
    for i in range(g - 1):  # summed a first group at a time, as the pairs come
        null += s[:, first == i].sum(axis=1)
    return float(obs.mean()), null / obs.size


def _pair_stat(c: FloatArray, win: FloatArray, k: int, delta: npt.NDArray[np.int64]) -> FloatArray:
    """(surrogates, pairs) values of s, row j of c moved by delta[:, j] (0 <= delta < n).

    `win` is `_window_max(c, k)`: the largest c over the k lags from every
    shift, found once per row; lags 1..k from shift d start at d + 1, lags
    -k..-1 at d - k, so each surrogate costs three gathers.
    """
    n = c.shape[1]
    rows = np.arange(c.shape[0])[None, :]
    around = np.maximum(win[rows, (delta + 1) % n], win[rows, (delta - k) % n])
    return np.asarray(around - np.maximum(c[rows, delta], 0.0), dtype=np.float64)


def _window_max(c: FloatArray, k: int) -> FloatArray:
    """out[j, d] = max of c[j, (d + L) % n] over 0 <= L < k (circular), for every d.

    A window maximum of width k by doubling (maxima of overlapping power-of-two
    runs): the same values as gathering all k lags, at a few passes per row.
    """
    n = c.shape[1]
    ext = np.concatenate([c, c[:, :k]], axis=1)  # ext[:, i] = c[:, i % n] for i < n + k
    runs, width = ext, 1  # runs[:, i] = max of ext[:, i : i + width]
    while 2 * width <= k:
        runs = np.maximum(runs[:, :-width], runs[:, width:])
        width *= 2
    return np.asarray(np.maximum(runs[:, :n], runs[:, k - width : k - width + n]), np.float64)
