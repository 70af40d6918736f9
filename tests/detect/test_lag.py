"""Lag estimation: sub-sample precision, noise floor, rank correlation guards."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect.lag import (
    LagMemo,
    fluctuations,
    pairwise_lags,
    positions_from_lags,
    rank_correlation,
)


def _pulses(n: int, step_s: float, delays_s: list[float], seed: int = 0) -> np.ndarray:
    """Rows of the same random pulse train, row i delayed by delays_s[i] (exact, via FFT phase)."""
    rng = np.random.default_rng(seed)
    base = np.convolve(rng.normal(size=n), np.hanning(9), mode="same")
    freqs = np.fft.rfftfreq(n, step_s)
    spec = np.fft.rfft(base)
    return np.stack([np.fft.irfft(spec * np.exp(-2j * np.pi * freqs * d), n) for d in delays_s])


def test_sub_sample_lags_are_recovered():
    delays = [0.0, 0.35, 0.7, 1.05]
    x = _pulses(2000, 0.5, delays)
    lm = pairwise_lags(x, 0.5, max_lag_s=5.0, min_corr=0.2)
    # Row 0 against the others: lags of 0.35 s measured at 0.5 s sampling.
    assert lm.lag_s[0] == pytest.approx(delays, abs=0.08)
    assert lm.lag_s[1, 0] == pytest.approx(-0.35, abs=0.08)
    assert np.all(lm.peak[0] > 0.9)


def test_positions_are_least_squares_offsets():
    delays = [0.0, 1.2, 2.3, 3.1]
    lm = pairwise_lags(_pulses(3000, 0.2, delays, seed=3), 0.2, max_lag_s=6.0, min_corr=0.2)
    assert positions_from_lags(lm) == pytest.approx(delays, abs=0.05)


def test_uncorrelated_rows_have_no_lag():
    rng = np.random.default_rng(1)
    lm = pairwise_lags(rng.normal(size=(3, 2000)), 0.1, max_lag_s=2.0, min_corr=0.25)
    off = ~np.eye(3, dtype=bool)
    assert np.isnan(lm.lag_s[off]).all()
    assert np.isnan(positions_from_lags(lm)[1:]).all()


def test_flat_rows_are_not_correlated_with_anything():
    x = np.zeros((2, 500))
    x[1] = np.sin(np.arange(500) / 5)
    lm = pairwise_lags(x, 0.1, max_lag_s=1.0, min_corr=0.25)
    assert lm.peak[0, 1] == 0.0
    assert np.isnan(lm.lag_s[0, 1])


def test_fluctuations_remove_trend_and_fill_gaps():
    t = np.arange(600) * 0.1
    x = np.stack([0.01 * t + np.sin(t * 3)])
    x[0, 100:110] = np.nan
    f = fluctuations(x, 0.1, trend_window_s=10.0)
    assert np.isfinite(f).all()
    assert abs(float(np.mean(f[0, 150:450]))) < 0.05  # the ramp is gone


def test_rank_correlation_guards_constant_and_short_input():
    assert rank_correlation(np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 2.0])) == 1.0
    assert rank_correlation(np.array([2.0, 1.0, 0.0]), np.array([0.0, 1.0, 2.0])) == -1.0
    assert rank_correlation(np.array([1.0, 1.0, 1.0]), np.array([0.0, 1.0, 2.0])) is None
    assert rank_correlation(np.array([np.nan, 1.0, 2.0]), np.array([0.0, 1.0, 2.0])) is None


def _same(a, b) -> bool:
    return (
        all(
            np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True)
            for f in ("lag_s", "peak", "zero")
        )
        and a.noise_floor == b.noise_floor
    )


def test_memo_gives_what_pairwise_lags_gives_for_the_same_rows_in_another_order():
    """Inference (group order) and the window statistics (stage order) share one computation."""
    x = _pulses(3000, 0.2, [0.0, 0.4, 0.8, 1.2, 1.6], seed=5)
    x[3] = 1.0  # a flat row: its lags are NaN, its correlations 0
    memo = LagMemo()
    first = memo.pairwise_lags(x, 0.2, 5.0, 0.2)
    assert _same(first, pairwise_lags(x, 0.2, 5.0, 0.2))
    perm = np.array([2, 4, 0, 3, 1])
    again = memo.pairwise_lags(x[perm], 0.2, 5.0, 0.2)
    assert _same(again, pairwise_lags(x[perm], 0.2, 5.0, 0.2))
    assert len(memo._done) == 1  # found, not computed again


def test_memo_computes_afresh_for_other_rows_or_options():
    x = _pulses(2000, 0.2, [0.0, 0.5, 1.0], seed=6)
    memo = LagMemo()
    memo.pairwise_lags(x, 0.2, 5.0, 0.2)
    y = x.copy()
    y[1, 7] += 1e-12  # one value in one row differs: not the same rows
    assert _same(memo.pairwise_lags(y, 0.2, 5.0, 0.2), pairwise_lags(y, 0.2, 5.0, 0.2))
    assert _same(memo.pairwise_lags(x, 0.2, 2.0, 0.2), pairwise_lags(x, 0.2, 2.0, 0.2))
    assert len(memo._done) == 3


@pytest.mark.parametrize("n_rows", [5, 6, 7, 10])
def test_a_pairs_lags_do_not_depend_on_the_rows_order(n_rows: int) -> None:
    """Regression: summed by matrix products, a pair's correlations took the last bits of
    their place in the matrix (5, 6, 7 and 10 rows did), so LagMemo's permuted result was
    not what pairwise_lags gives for the permuted rows."""
    rng = np.random.default_rng(n_rows)
    x = np.cumsum(rng.normal(size=(n_rows, 3001)), axis=1)
    x[2] = x[0]  # equal rows may trade places
    base = pairwise_lags(x, 0.1, 5.0, 0.2)
    for _ in range(10):
        perm = rng.permutation(n_rows)
        ix = np.ix_(perm, perm)
        again = pairwise_lags(x[perm], 0.1, 5.0, 0.2)
        assert _same(
            again, type(base)(base.lag_s[ix], base.peak[ix], base.zero[ix], base.noise_floor)
        )
