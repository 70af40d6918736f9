"""The simulator's thermal lag: scipy's first-order IIR, float for float, without scipy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from bubblewatch.sim.power import _lag


def test_recursion_and_state() -> None:
    x = np.array([50.0, 70.0, 70.0, 30.0])
    alpha = 0.25
    y, z = _lag(alpha, x, (1 - alpha) * 40.0)
    want, prev = [], 40.0
    for v in x:
        prev = alpha * v + (1 - alpha) * prev
        want.append(prev)
    assert y.tolist() == pytest.approx(want, rel=1e-15)
    assert z == pytest.approx((1 - alpha) * want[-1], rel=1e-15)
    # Two halves with the state carried are the whole.
    y1, z1 = _lag(alpha, x[:2], (1 - alpha) * 40.0)
    y2, z2 = _lag(alpha, x[2:], z1)
    assert np.concatenate([y1, y2]).tolist() == y.tolist() and z2 == z


@pytest.mark.parametrize("alpha", [1 - np.exp(-0.1 / 30), 0.01, 0.5])
def test_same_floats_as_scipy_lfilter(alpha: float) -> None:
    signal = pytest.importorskip("scipy.signal")
    x = np.random.default_rng(0).uniform(30, 90, 5000)
    b, a = [alpha], [1.0, -(1.0 - alpha)]
    zi = signal.lfiltic(b, a, y=[x[0]], x=[x[0]])
    want, zf = signal.lfilter(b, a, x, zi=zi)
    got, z = _lag(alpha, x, (1 - alpha) * x[0])
    assert np.array_equal(got, want) and z == zf[0]


def test_simulating_imports_no_scipy() -> None:
    code = (
        "import sys\n"
        "from bubblewatch.sim import load_scenario, simulate\n"
        "res = simulate(load_scenario('pp8-serialized'), duration_s=5.0, seed=0)\n"
        "print(res.timeline.n_gpus, 'scipy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "False"]
