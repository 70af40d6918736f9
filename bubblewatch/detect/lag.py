"""Lags between stages: cross-correlation of slow activity fluctuations, sub-sample precise.

Decode steps (ms per stage) are far below NVML's sampling rate; what survives
is the slower ripple of load (prefill waves, batch growth), which reaches stage
s+1 one stage-time after stage s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LagMatrix:
    """Pairwise results for rows of a (n, T) signal array.

    `lag_s[i, j]`: how long after row i's fluctuations row j shows them (NaN
    where the peak correlation is below the noise floor); `peak[i, j]`: the
    correlation at that lag; `zero[i, j]`: the correlation at lag 0.
    """

    lag_s: FloatArray
    peak: FloatArray
    zero: FloatArray
    noise_floor: float


def fluctuations(x: FloatArray, step_s: float, trend_window_s: float) -> FloatArray:
    """Rows with gaps filled by the row mean and the slow trend (moving mean) removed."""
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x)
    if ok.all():  # nothing to fill: the plain mean is nanmean's, bit for bit
        mean = x.mean(axis=1, keepdims=True)
    else:
        mean = np.nanmean(np.where(ok, x, np.nan), axis=1, keepdims=True)
    mean = np.where(np.isfinite(mean), mean, 0.0)
    if not ok.all():
        x = np.where(ok, x, mean)
    width = max(3, round(trend_window_s / step_s) | 1)
    if width < x.shape[1]:
        trend = moving_mean(x, width)
        return np.asarray(x - trend, dtype=np.float64)
    return np.asarray(x - mean, dtype=np.float64)


def moving_mean(x: FloatArray, width: int) -> FloatArray:
    """Centred moving mean along rows over an odd `width`, the edges repeated beyond the ends."""
    h = width // 2
    edges = (np.repeat(x[:, :1], h, axis=1), x, np.repeat(x[:, -1:], h, axis=1))
    c = np.cumsum(np.concatenate(edges, axis=1), axis=1)
    out = np.empty(x.shape)
    out[:, 0] = c[:, width - 1]  # the window's sum: cumulative sum at its end less before it
    out[:, 1:] = c[:, width:] - c[:, :-width]
    return np.asarray(out / width, dtype=np.float64)


def average_down(x: FloatArray, max_points: int) -> tuple[FloatArray, int]:
    """Rows averaged over runs of k samples, k the least that leaves at most max_points; (rows, k).

    A run shorter than 8 is added in order from 0.0, which is what numpy's mean
    of it does, without the slow reduction over a short last axis.
    """
    n = x.shape[1]
    if n <= max_points:
        return x, 1
    k = int(np.ceil(n / max_points))
    m = n // k
    if k >= 8:  # numpy sums runs this long pairwise
        return np.asarray(x[:, : m * k].reshape(x.shape[0], m, k).mean(axis=2)), k
    total = x[:, 0 : m * k : k] + 0.0
    for j in range(1, k):
        total += x[:, j : m * k : k]
    return np.asarray(total / k, dtype=np.float64), k


def shifted_products(z: FloatArray, max_lag: int) -> FloatArray:
    """window[i, j, max_lag + L] = sum_t z[i, t] z[j, t + L] for |L| <= max_lag (0 beyond the ends).

    The linear (not circular) cross-correlation of every pair of rows; lag -L
    of (i, j) is lag L of (j, i), so each lag L >= 0 is one matrix product.
    """
    n, t = z.shape
    window = np.empty((n, n, 2 * max_lag + 1))
    for lag in range(max_lag + 1):
        c = z[:, : t - lag] @ z[:, lag:].T  # c[i, j] = sum_t z_i[t] z_j[t + lag]
        window[:, :, max_lag + lag] = c
        window[:, :, max_lag - lag] = c.T
    return window


def pair_correlations(x: FloatArray) -> FloatArray:
    """c[k, L] = sum_t x_i[t] x_j[(t + L) % n] for the k-th pair i < j (numpy.triu_indices order).

    Circular cross-correlations, every pair in one inverse FFT.
    """
    g, n = x.shape
    f = np.fft.rfft(x, n, axis=1)
    spectra = np.empty((g * (g - 1) // 2, f.shape[1]), dtype=np.complex128)
    k = 0
    for i in range(g - 1):  # conj(F_i) F_j for the rows after i, written in place
        np.multiply(np.conj(f[i]), f[i + 1 :], out=spectra[k : k + g - 1 - i])
        k += g - 1 - i
    return np.asarray(np.fft.irfft(spectra, n, axis=1), dtype=np.float64)


def pairwise_lags(x: FloatArray, step_s: float, max_lag_s: float, min_corr: float) -> LagMatrix:
    """Cross-correlate every pair of rows over +-max_lag_s; parabolic peak refinement for sub-steps.

    Only lags up to max_lag_s are read, so each is one product of the rows with
    themselves shifted (a few dozen lags of a few thousand samples), not a
    transform of the whole series.
    """
    t = x.shape[1]
    z = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((z * z).sum(axis=1))
    flat = norm <= 1e-12 * max(1.0, float(norm.max(initial=0.0)))
    norm = np.where(flat, 1.0, norm)
    z = z / norm[:, None]
    max_lag = int(min(max(1, round(max_lag_s / step_s)), max(1, t // 4)))
    # BLAS may round a product's entry differently by its row's place in the matrix:
    # computed in an order of the rows' own bytes, the same rows in any order give the
    # same values (LagMemo relies on it).
    order = np.array(sorted(range(z.shape[0]), key=lambda i: z[i].tobytes()), dtype=np.intp)
    back = np.argsort(order)
    window = shifted_products(z[order], max_lag)[np.ix_(back, back)]
    lags = np.arange(-max_lag, max_lag + 1)
    k = np.argmax(window, axis=2)
    peak = np.take_along_axis(window, k[:, :, None], axis=2)[:, :, 0]
    # Parabola through the peak and its neighbours gives the sub-sample offset.
    km, kp = np.clip(k - 1, 0, lags.size - 1), np.clip(k + 1, 0, lags.size - 1)
    ym = np.take_along_axis(window, km[:, :, None], axis=2)[:, :, 0]
    yp = np.take_along_axis(window, kp[:, :, None], axis=2)[:, :, 0]
    denom = ym - 2 * peak + yp
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.where(np.abs(denom) > 1e-12, 0.5 * (ym - yp) / denom, 0.0)
    edge = (k == 0) | (k == lags.size - 1)
    delta = np.where(edge, 0.0, np.clip(delta, -0.5, 0.5))
    lag_s = (lags[k] + delta) * step_s
    zero = window[:, :, int(np.searchsorted(lags, 0))]
    noise = max(min_corr, 4.0 / np.sqrt(max(t, 1)))
    bad = (peak < noise) | flat[:, None] | flat[None, :]
    lag_s = np.where(bad, np.nan, lag_s)
    np.fill_diagonal(lag_s, 0.0)
    peak = np.where(flat[:, None] | flat[None, :], 0.0, peak)
    zero = np.where(flat[:, None] | flat[None, :], 0.0, zero)
    return LagMatrix(lag_s, peak, zero, noise)


@dataclass
class LagMemo:
    """The pairwise lags already found in one window, found again for the same rows in any order.

    Topology inference and the window statistics cross-correlate the same
    signals when each stage is one GPU (group means and stage means of one
    row), in group order and in stage order: the second call takes the first's
    result, rows and columns permuted. `pairwise_lags` gives each pair the same
    values whatever the other rows and their order, so the permuted result is
    the one it would compute.
    """

    _done: list[tuple[tuple[float, float, float], FloatArray, LagMatrix]] = field(
        default_factory=list
    )

    def pairwise_lags(
        self, x: FloatArray, step_s: float, max_lag_s: float, min_corr: float
    ) -> LagMatrix:
        """`pairwise_lags(x, ...)`, from an earlier call on the same rows where there was one."""
        key = (step_s, max_lag_s, min_corr)
        for k, rows, lm in self._done:
            order = _same_rows(x, rows) if k == key else None
            if order is not None:
                ix = np.ix_(order, order)
                return LagMatrix(lm.lag_s[ix], lm.peak[ix], lm.zero[ix], lm.noise_floor)
        lm = pairwise_lags(x, step_s, max_lag_s, min_corr)
        self._done.append((key, x.copy(), lm))
        return lm


def _same_rows(x: FloatArray, rows: FloatArray) -> npt.NDArray[np.intp] | None:
    """`order` with x[k] == rows[order[k]] for every k (bit for bit), or None."""
    if x.shape != rows.shape:
        return None
    equal = (x[:, None, :] == rows[None, :, :]).all(axis=2)
    order: list[int] = []
    for k in range(x.shape[0]):
        free = [j for j in np.flatnonzero(equal[k]).tolist() if j not in order]
        if not free:
            return None
        order.append(free[0])
    return np.array(order, dtype=np.intp)


def rank_correlation(x: FloatArray, y: FloatArray) -> float | None:
    """Spearman correlation of finite pairs; None when fewer than 3 or either side is constant."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return None
    rx, ry = average_ranks(x[ok]), average_ranks(y[ok])
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def average_ranks(x: FloatArray) -> FloatArray:
    """Ranks from 1, ties given the mean of their ranks (scipy.stats.rankdata's "average")."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    new = np.concatenate(([True], xs[1:] != xs[:-1]))
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], xs.size)
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = ((starts + ends + 1) / 2.0)[np.cumsum(new) - 1]
    return ranks


def positions_from_lags(lags: LagMatrix) -> FloatArray:
    """Least-squares time offset of each row from pairwise lags, weighted by peak correlation.

    Solves x_j - x_i ~ lag[i, j]; rows with no usable lag get NaN. The first
    row with data is pinned to 0.
    """
    n = lags.lag_s.shape[0]
    w = np.where(np.isfinite(lags.lag_s), np.clip(lags.peak, 0.0, 1.0), 0.0)
    np.fill_diagonal(w, 0.0)
    w = 0.5 * (w + w.T)
    lag = np.where(np.isfinite(lags.lag_s), lags.lag_s, 0.0)
    lag = 0.5 * (lag - lag.T)
    connected = w.sum(axis=1) > 0
    if connected.sum() < 2:
        out = np.full(n, np.nan)
        out[connected] = 0.0
        return out
    # Graph Laplacian system L x = b with b_j = sum_i w_ij lag_ij.
    lap = np.diag(w.sum(axis=1)) - w
    b = (w * lag).sum(axis=0)
    idx = np.flatnonzero(connected)
    sub = lap[np.ix_(idx, idx)]
    sol, *_ = np.linalg.lstsq(sub, b[idx], rcond=None)
    out = np.full(n, np.nan)
    out[idx] = sol - sol[0]
    return out
