"""The waiting draw's two least-squares lines: the closed form against numpy's polyfit."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect.waiting import _both_lines


@pytest.mark.parametrize("seed", range(20))
def test_both_lines_are_polyfits_lines(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 40_000))
    x = rng.uniform(0.0, 1.0, n) * rng.uniform(0.01, 1.0)
    y = 55.0 + 600.0 * x + rng.normal(0.0, rng.uniform(0.1, 80.0), n)
    got = _both_lines(x, y)
    want = (*np.polyfit(x, y, 1), *np.polyfit(y, x, 1))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_a_constant_side_gives_no_rising_line() -> None:
    x = np.linspace(0.1, 0.9, 50)
    assert _both_lines(x, np.full(50, 300.0))[0] == 0.0
    assert _both_lines(np.full(50, 0.5), x * 100)[2] == 0.0
