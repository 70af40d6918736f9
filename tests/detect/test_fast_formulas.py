"""The detector's faster computations give what the formulas they replaced gave.

Each reference below is the earlier implementation, kept here as the
definition: the cross-correlations by full-length FFT, the surrogate nulls
from whole rolled copies of each pair's correlation, one inverse transform
per row (the in-phase test's, groups._significance, as the turn-taking and
stagger tests'), and the phase features' reductions through numpy.ma. Where only the
grouping of the same operations changed (batched transforms, gathers of the
same elements, the same sums) the results are asked to agree to 1e-12 on
correlations bounded by 1 (numpy gives them bit for bit; the margin leaves a
library free to round a batched transform otherwise). Where the method changed
(lagged products summed directly instead of through an FFT) the tolerance is
stated where it is used.
"""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect import groups, lag, stagger, stats, turns
from bubblewatch.detect.lag import shifted_products
from bubblewatch.detect.reductions import (
    median,
    nan_mean,
    nan_spread,
    nanmedian,
    row_medians,
    row_nanmedians,
)

TIGHT = 1e-12


def _red(shape: tuple[int, int], seed: int, phi: float = 0.9) -> np.ndarray:
    """Autocorrelated rows (like load fluctuations), some sharing a delayed common part."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(shape[0], shape[1] + 64))
    common = np.zeros(shape[1] + 64)
    acc = np.zeros(shape[0])
    out = np.empty_like(e)
    for t in range(e.shape[1]):
        acc = phi * acc + e[:, t]
        common[t] = acc[0]
        out[:, t] = acc
    for k in range(1, shape[0], 2):  # odd rows follow row 0, k samples late
        out[k] = 0.5 * out[k] + np.roll(common, k)
    return out[:, 64:]


def _fft_window(z: np.ndarray, max_lag: int) -> np.ndarray:
    """The reference: window[i, j, max_lag + L] by a zero-padded FFT of the whole rows."""
    n, t = z.shape
    nfft = 1 << int(np.ceil(np.log2(max(2, 2 * t))))
    f = np.fft.rfft(z, nfft, axis=1)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    window = np.empty((n, n, lags.size))
    for i in range(n):
        window[i] = np.fft.irfft(np.conj(f[i])[None, :] * f, nfft, axis=1)[:, lags]
    return window[:, :, np.argsort(lags)]


@pytest.mark.parametrize(("shape", "max_lag"), [((8, 6000), 50), ((3, 401), 100), ((2, 40), 10)])
def test_shifted_products_equal_the_fft_cross_correlation(shape, max_lag) -> None:
    """Summed directly, the lagged products are the FFT's to 1e-12.

    The rows are standardised (norm 1), so every entry is at most 1 and the FFT's
    rounding error is about machine epsilon times log2(nfft), ~1e-15 here.
    """
    x = _red(shape, seed=shape[1])
    z = x - x.mean(axis=1, keepdims=True)
    z /= np.sqrt((z * z).sum(axis=1))[:, None]
    assert shifted_products(z, max_lag) == pytest.approx(_fft_window(z, max_lag), abs=TIGHT)


def test_pairwise_lags_are_those_of_the_fft_correlation(monkeypatch) -> None:
    """Lags agree to 1e-9 s: the peak's sub-sample refinement divides the correlations'
    ~1e-15 difference by the peak's curvature (>= 1e-4 for these rows)."""
    x = _red((6, 3000), seed=7)
    x[4] = 0.3  # a flat row: no lag, no correlation
    got = lag.pairwise_lags(x, 0.1, max_lag_s=5.0, min_corr=0.2)
    monkeypatch.setattr(lag, "shifted_products", _fft_window)
    want = lag.pairwise_lags(x, 0.1, max_lag_s=5.0, min_corr=0.2)
    assert np.array_equal(np.isnan(got.lag_s), np.isnan(want.lag_s))
    assert np.isfinite(want.lag_s).sum() > 6  # the odd rows' lags were measured
    assert got.lag_s == pytest.approx(want.lag_s, abs=1e-9, nan_ok=True)
    for field in ("peak", "zero"):
        assert getattr(got, field) == pytest.approx(getattr(want, field), abs=TIGHT)


def test_pair_correlations_are_one_transform_per_row() -> None:
    """All pairs in one inverse transform: what a transform per first row of a pair gave."""
    x = _red((5, 999), seed=3)
    n = x.shape[1]
    f = np.fft.rfft(x, n, axis=1)
    want = np.concatenate(
        [np.fft.irfft(np.conj(f[i])[None, :] * f[i + 1 :], n, axis=1) for i in range(4)]
    )
    c = lag.pair_correlations(x)
    assert c == pytest.approx(want, abs=TIGHT)
    # Definition: c[k, L] = sum_t x_i[t] x_j[(t + L) % n], checked at a few lags directly.
    first, second = np.triu_indices(5, 1)
    for lag_steps in (0, 1, 17, n - 1):
        direct = (x[first] * np.roll(x[second], -lag_steps, axis=1)).sum(axis=1)
        assert c[:, lag_steps] == pytest.approx(direct, rel=1e-9)


def _reference_turns(x: np.ndarray, offsets: np.ndarray) -> tuple[float, np.ndarray]:
    """turns._statistic as it was: a transform per first GPU, the null from rolled copies."""
    g, n = x.shape
    z = x - x.mean(axis=1, keepdims=True)
    z = z / np.sqrt((z * z).sum(axis=1))[:, None]
    f = np.fft.rfft(z, n, axis=1)
    margin = max(2, n // 50)
    observed: list[float] = []
    null = np.zeros(offsets.shape[0])
    for i in range(g - 1):
        c = np.fft.irfft(np.conj(f[i])[None, :] * f[i + 1 :], n, axis=1)
        observed += (-c[:, turns.LAGS % n].min(axis=1)).tolist()
        delta = (offsets[:, i + 1 :] - offsets[:, i : i + 1]) % n
        near = (delta < margin) | (delta > n - margin)
        delta = np.where(near, (delta + n // 2) % n, delta)
        least = np.minimum.reduce([np.roll(c, -lag, axis=1) for lag in turns.LAGS.tolist()])
        null += -least[np.arange(c.shape[0])[None, :], delta].sum(axis=1)
    return (g - 1) * float(np.mean(observed)), (g - 1) * null / len(observed)


def _offsets(n_surrogates: int, g: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << 30, size=(n_surrogates, g))


@pytest.mark.parametrize(("g", "n"), [(8, 1500), (2, 200), (5, 999)])
def test_turn_statistic_and_its_null_are_the_reference(g: int, n: int) -> None:
    x = _red((g, n), seed=g * n)
    offsets = _offsets(199, g, seed=n)
    stat, null = turns._statistic(x, offsets)
    ref_stat, ref_null = _reference_turns(x, offsets)
    assert stat == pytest.approx(ref_stat, abs=TIGHT)
    assert null == pytest.approx(ref_null, abs=TIGHT)
    assert np.ptp(null) > 0.01  # the surrogates differ from one another


@pytest.mark.parametrize(("g", "n"), [(8, 1500), (2, 200), (5, 999)])
def test_observed_turn_statistic_alone_is_the_reference(g: int, n: int) -> None:
    """Two products of the rows give the T that the circular correlations give, to 1e-12."""
    x = _red((g, n), seed=g + n)
    ref_stat, _ = _reference_turns(x, _offsets(3, g, seed=n))
    assert turns.observed_statistic(x) == pytest.approx(ref_stat, abs=TIGHT)
    assert abs(ref_stat) > 0.01  # a statistic away from 0 (the rows correlate)


def _reference_around_max(c: np.ndarray, k: int) -> np.ndarray:
    """out[j, d] = max of c[j, (d + L) % n] over 1 <= |L| <= k, gathered lag by lag."""
    lags = [lag for lag in range(-k, k + 1) if lag]
    return np.maximum.reduce([np.roll(c, -lag, axis=1) for lag in lags])


def _reference_stagger(
    x: np.ndarray, step_s: float, max_lag_s: float, offsets: np.ndarray
) -> tuple[float, np.ndarray]:
    """stagger._statistic as it was: a transform per first group, the null from rolled copies."""
    g, n = x.shape
    x = x - x.mean(axis=1, keepdims=True)
    x = x / np.sqrt((x * x).sum(axis=1))[:, None]
    offsets = offsets % n
    max_lag = int(min(max(1, round(max_lag_s / step_s)), max(1, n // 8)))
    margin = 2 * max_lag + 1
    f = np.fft.rfft(x, n, axis=1)
    observed = []
    null = np.zeros(offsets.shape[0])
    for i in range(g - 1):
        c = np.fft.irfft(np.conj(f[i])[None, :] * f[i + 1 :], n, axis=1)
        around = _reference_around_max(c, max_lag)
        rows = np.arange(c.shape[0])[None, :]
        observed.append(around[:, 0] - np.maximum(c[:, 0], 0.0))
        delta = (offsets[:, i + 1 :] - offsets[:, i : i + 1]) % n
        near = (delta < margin) | (delta > n - margin)
        delta = np.where(near, (delta + n // 2) % n, delta)
        null += (around[rows, delta] - np.maximum(c[rows, delta], 0.0)).sum(axis=1)
    obs = np.concatenate(observed)
    return float(obs.mean()), null / obs.size


@pytest.mark.parametrize(("g", "n", "max_lag_s"), [(8, 3000, 5.0), (2, 120, 5.0), (4, 700, 1.3)])
def test_stagger_statistic_and_its_null_are_the_reference(g: int, n: int, max_lag_s: float) -> None:
    x = _red((g, n), seed=g + n)
    offsets = _offsets(199, g, seed=g)
    stat, null = stagger._statistic(x, 0.2, max_lag_s, offsets)
    ref_stat, ref_null = _reference_stagger(x, 0.2, max_lag_s, offsets)
    assert stat == pytest.approx(ref_stat, abs=TIGHT)
    assert null == pytest.approx(ref_null, abs=TIGHT)
    assert stat > float(np.median(null))  # the delayed rows stagger


def _masked(a: np.ndarray, how: str, axis: int) -> np.ndarray:
    """segments.nan_reduce as it was: numpy.ma's mean, or max minus min, of the finite values."""
    ok = np.isfinite(a)
    out = np.full(a.shape[1 - axis], np.nan)
    has = ok.any(axis=axis)
    take = a[:, has] if axis == 0 else a[has, :]
    mask = ok[:, has] if axis == 0 else ok[has, :]
    m = np.ma.masked_array(take, mask=~mask)
    r = m.mean(axis=axis) if how == "mean" else m.max(axis=axis) - m.min(axis=axis)
    out[has] = np.ma.filled(r, np.nan)
    return out


@pytest.mark.parametrize("axis", [0, 1])
def test_nan_mean_and_spread_are_numpy_mas(axis: int) -> None:
    """The same sums in the same order, so the same values bit for bit (NaN where none)."""
    rng = np.random.default_rng(axis)
    for _ in range(200):
        shape = (int(rng.integers(1, 10)), int(rng.integers(1, 40)))
        a = rng.normal(size=shape) * 10 ** rng.uniform(-3, 3)
        a[rng.random(shape) < rng.random()] = np.nan
        a[rng.random(shape) < 0.05] = np.inf
        a[:, 0] = np.nan  # a column (and, for axis 1, no row) with no value
        assert np.array_equal(nan_mean(a, axis=axis), _masked(a, "mean", axis), equal_nan=True)
        assert np.array_equal(nan_spread(a, axis=axis), _masked(a, "spread", axis), equal_nan=True)


def _reference_fluctuations(x: np.ndarray, step_s: float, trend_window_s: float) -> np.ndarray:
    """lag.fluctuations as it was: nanmean fill, np.pad and a prepended zero for the trend."""
    x = np.array(x, dtype=np.float64)
    mean = np.nanmean(np.where(np.isfinite(x), x, np.nan), axis=1, keepdims=True)
    mean = np.where(np.isfinite(mean), mean, 0.0)
    x = np.where(np.isfinite(x), x, mean)
    width = max(3, round(trend_window_s / step_s) | 1)
    if width >= x.shape[1]:
        return x - mean
    h = width // 2
    c = np.cumsum(np.pad(x, ((0, 0), (h, h)), mode="edge"), axis=1)
    c = np.concatenate([np.zeros((x.shape[0], 1)), c], axis=1)
    return x - (c[:, width:] - c[:, :-width]) / width


@pytest.mark.parametrize("gaps", [False, True])
def test_fluctuations_are_the_reference_bit_for_bit(gaps: bool) -> None:
    """The same sums in the same order; a row without gaps skips nanmean's fill only."""
    rng = np.random.default_rng(int(gaps))
    for _ in range(100):
        shape = (int(rng.integers(1, 9)), int(rng.integers(2, 700)))
        x = rng.normal(size=shape) * 10 ** rng.uniform(-3, 3)
        x[rng.random(shape) < 0.05] = -0.0
        if gaps:
            x[rng.random(shape) < 0.2] = np.nan
            x[:, 0] = np.nan  # no row is all gaps (nanmean would warn, as before)
            x[:, 1] = 1.0
        step_s, trend_s = float(rng.choice([0.1, 1.0])), float(rng.choice([3.0, 10.0, 30.0]))
        got = lag.fluctuations(x, step_s, trend_s)
        want = _reference_fluctuations(x, step_s, trend_s)
        assert np.array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_stage_mean_is_nanmean_over_the_stage_rows() -> None:
    """One-GPU stages take their row (a -0.0 as nanmean's 0.0); larger stages nanmean's."""
    rng = np.random.default_rng(4)
    a = rng.normal(size=(6, 500))
    a[rng.random(a.shape) < 0.1] = np.nan
    a[rng.random(a.shape) < 0.05] = -0.0
    a[3] = np.nan  # a GPU with no value: NaN, no warning
    index = [np.array([0]), np.array([1, 2]), np.array([3]), np.array([4, 3, 5])]
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        want = np.stack([np.nanmean(a[rows], axis=0) for rows in index])
    got = stats.stage_mean(a, index)
    assert np.array_equal(got, want, equal_nan=True)
    zeros = want == 0.0
    assert zeros.sum() > 10
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def test_shift_offsets_are_the_seeded_draws_and_read_only() -> None:
    want = np.random.default_rng(0x57A66E).integers(0, 1 << 30, size=(199, 8))
    got = stagger.shift_offsets(0x57A66E, 199, 8)
    assert np.array_equal(got, want)
    assert stagger.shift_offsets(0x57A66E, 199, 8) is got  # drawn once per shape
    with pytest.raises(ValueError, match="read-only"):
        got[0, 0] = 1


def _reference_significance(fl: np.ndarray, step_s: float) -> list[np.ndarray]:
    """groups._significance as it was: every ordered pair its own transform, diagonal included."""
    x = np.where(np.isfinite(fl), fl, 0.0)
    n_rows, n = x.shape
    if n > groups._MAX_POINTS:
        k = int(np.ceil(n / groups._MAX_POINTS))
        m = n // k
        x = x[:, : m * k].reshape(n_rows, m, k).mean(axis=2)
        step_s, n = step_s * k, m
    x = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=1))
    flat = norm <= 1e-12
    x = x / np.where(flat, 1.0, norm)[:, None]
    f = np.fft.rfft(x, n, axis=1)
    far = int(min(max(8, round(5.0 / max(step_s, 1e-9))), n // 10))
    offsets = np.arange(far, n - far) if n - 2 * far >= 8 else np.arange(1, n)
    offsets = offsets[:: max(1, offsets.size // 256)]
    lags = np.arange(1, groups._ASYM_LAGS + 1)
    zero, spread, asym = (np.zeros((n_rows, n_rows)) for _ in range(3))
    for i in range(n_rows):
        c = np.fft.irfft(np.conj(f[i])[None, :] * f, n, axis=1)
        zero[i] = c[:, 0]
        spread[i] = np.sqrt(np.mean(c[:, offsets] ** 2, axis=1))
        lop = c[:, lags].sum(axis=1) - c[:, (-lags) % n].sum(axis=1)
        lop_null = c[:, (offsets[:, None] + lags) % n].sum(axis=2)
        lop_null -= c[:, (offsets[:, None] - lags) % n].sum(axis=2)
        asym[i] = lop / np.maximum(np.sqrt(np.mean(lop_null**2, axis=1)), 1e-9)
    out = [zero, zero / np.maximum(spread, 1e-6), asym]
    bad = flat[:, None] | flat[None, :]
    out = [np.where(bad, 0.0, a) for a in out]
    for a, diagonal in zip(out, (1.0, np.inf, 0.0), strict=True):
        np.fill_diagonal(a, diagonal)
    return out


@pytest.mark.parametrize("shape", [(8, 6000), (3, 500), (2, 50), (1, 300)])
def test_in_phase_significance_is_the_reference(shape: tuple[int, int]) -> None:
    """Pair (j, i) read backwards from pair (i, j): the reference's values but for rounding
    (the z-scores, up to ~sqrt(n), differed by 2.8e-14 on the 1 h file): 1e-12 relative."""
    fl = _red(shape, seed=shape[1] + 1)
    fl[0, 10:20] = np.nan
    if shape[0] > 2:
        fl[2] = 0.0  # a flat row
    got = groups._significance(fl, 0.1)
    for a, b in zip(got, _reference_significance(fl, 0.1), strict=True):
        assert a == pytest.approx(b, rel=1e-12, abs=TIGHT)
    if shape[0] > 1:
        assert np.abs(got[2]).max() > 1.0  # the lopsided pairs (a row following row 0 late)


@pytest.mark.parametrize("k", [2, 3, 7, 8, 11])
def test_average_down_is_the_mean_of_runs(k: int) -> None:
    """Runs shorter than 8 summed in order from 0.0 are numpy's mean bit for bit."""
    rng = np.random.default_rng(k)
    x = rng.normal(size=(5, 999 * k + 1))  # 999 runs of k and a sample left over
    x[rng.random(x.shape) < 0.3] = -0.0
    got, runs = lag.average_down(x, 1000)
    want = x[:, : 999 * k].reshape(5, 999, k).mean(axis=2)
    assert runs == k
    assert np.array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert lag.average_down(x, x.shape[1])[1] == 1


def _same(got: object, want: object) -> bool:
    """Equal bit for bit, NaN where NaN, and zeros of the same sign."""
    a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    zeros = b == 0.0
    return bool(
        np.array_equal(a, b, equal_nan=True)
        and np.array_equal(np.signbit(a[zeros]), np.signbit(b[zeros]))
    )


@pytest.mark.parametrize("n", [1, 2, 7, 8, 599, 600, 1201])
def test_medians_are_numpys(n: int) -> None:
    """The same partition and mean of the middle as np.median, np.nanmedian (also its
    numpy.ma path for rows under 600), with ties, -0.0, inf and NaN."""
    rng = np.random.default_rng(n)
    for trial in range(40):
        a = np.round(rng.normal(size=(4, n)), int(rng.integers(0, 3)))
        a[rng.random(a.shape) < 0.2] = -0.0
        a[rng.random(a.shape) < 0.02] = np.inf
        if trial % 2:
            a[rng.random(a.shape) < 0.2] = np.nan
            a[:, 0] = 1.5  # every row keeps a value: nanmedian would warn otherwise
        assert _same(median(a[1]), np.median(a[1]))
        assert _same(row_medians(a), np.median(a, axis=1))
        assert _same(nanmedian(a[2]), np.nanmedian(a[2]))
        assert _same(row_nanmedians(a), np.nanmedian(a, axis=1))


def test_nanmedian_of_nothing_is_nan_with_numpys_warning() -> None:
    with pytest.warns(RuntimeWarning, match="All-NaN slice"):
        assert np.isnan(nanmedian(np.full(3, np.nan)))
    with pytest.warns(RuntimeWarning, match="All-NaN slice"):
        assert np.isnan(row_nanmedians(np.array([[1.0, 2.0], [np.nan, np.nan]]))[1])
