"""Training steps from telemetry (detect/steps.py) on signals written by hand.

Each stage's busy pattern is drawn on a 1 ms grid from a fill-and-drain
schedule (GPipe: stage s runs its m forwards from s*f, its m backwards of 2f
each in reverse after the last stage's), repeated every step, then sampled as
GPM does: the mean since the previous poll.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bubblewatch.detect.steps import dispersion, find_period, measure_steps, wave_order

FINE_S = 0.001


def gpipe_busy(p: int, m: int, f_s: float, step_s: float, duration_s: float, **kw) -> np.ndarray:
    """(p, n_fine) busy 0/1 of GPipe steps of length step_s (>= the schedule's makespan)."""
    jitter = kw.get("jitter", 0.0)
    order = kw.get("order", list(range(p)))
    rng = np.random.default_rng(kw.get("seed", 0))
    n = int(duration_s / FINE_S)
    busy = np.zeros((p, n))
    t = 0.0
    while t < duration_s:
        scale = 1.0 + jitter * rng.standard_normal()
        for row, s in enumerate(order):
            fwd = (t + s * f_s * scale, t + (s + m) * f_s * scale)
            back0 = t + ((p - 1 + m) * f_s + 2 * f_s * (p - 1 - s)) * scale
            bwd = (back0, back0 + 2 * m * f_s * scale)
            for a, b in (fwd, bwd):
                busy[row, int(a / FINE_S) : min(int(b / FINE_S), n)] = 1.0
        t += step_s * scale
    return busy


def sample(busy: np.ndarray, interval_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Poll every interval_s: each sample is the mean since the previous poll."""
    k = round(interval_s / FINE_S)
    n = busy.shape[1] // k
    samples = busy[:, : n * k].reshape(busy.shape[0], n, k).mean(axis=2)
    return (np.arange(n) + 1) * interval_s, samples


@pytest.mark.parametrize(("step_s", "interval_s"), [(0.45, 0.1), (1.23, 0.1), (4.1, 1.0)])
def test_period_of_gpipe_steps(step_s: float, interval_s: float) -> None:
    f = step_s / 14.0  # p=4, m=4: makespan 7 forward + 7 backward slots of f and 2f... within
    busy = gpipe_busy(4, 4, f, step_s, 60.0 * max(1.0, interval_s / 0.1) ** 0.5 * 2)
    t, occ = sample(busy, interval_s)
    steps = measure_steps(t, occ, interval_s)
    assert steps.period is not None
    assert steps.period.period_s == pytest.approx(step_s, rel=0.01)
    assert steps.stage_busy_s is not None
    duty = busy.mean(axis=1)
    assert steps.stage_busy_s == pytest.approx(tuple(duty * step_s), rel=0.03)


def test_waves_pass_the_stages_in_order() -> None:
    busy = gpipe_busy(4, 4, 0.03, 0.45, 60.0)
    t, occ = sample(busy, 0.1)
    steps = measure_steps(t, occ, 0.1)
    assert steps.waves is not None
    assert steps.waves.order == (0, 1, 2, 3)
    assert steps.waves.rank_correlation == pytest.approx(1.0)
    pos = steps.waves.position
    assert pos[0] == 0.0 and pos[-1] == pytest.approx(1.0)
    assert all(a < b for a, b in itertools.pairwise(pos))


def test_a_topology_with_two_stages_swapped_shows_in_the_wave_order() -> None:
    """The telemetry's stage 1 row holds the job's stage 2 and vice versa."""
    busy = gpipe_busy(4, 4, 0.03, 0.45, 60.0, order=[0, 2, 1, 3])
    t, occ = sample(busy, 0.1)
    steps = measure_steps(t, occ, 0.1)
    assert steps.waves is not None
    assert steps.waves.order == (0, 2, 1, 3)
    assert steps.waves.rank_correlation is not None and steps.waves.rank_correlation < 0.9


def test_steps_of_varying_length_are_still_found() -> None:
    busy = gpipe_busy(4, 8, 0.025, 0.6, 90.0, jitter=0.03, seed=4)
    t, occ = sample(busy, 0.1)
    period = find_period(t, occ - occ.mean(axis=1, keepdims=True), 0.1)
    assert period is not None
    assert period.period_s == pytest.approx(0.6, rel=0.02)


def test_no_period_in_noise_or_a_flat_signal() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(600) * 0.1
    assert measure_steps(t, rng.random((4, 600)), 0.1).period is None
    assert measure_steps(t, np.full((4, 600), 0.7), 0.1).period is None


def test_a_step_far_shorter_than_the_sampling_is_not_claimed() -> None:
    """A 0.45 s step polled every 1 s: the means leave an attenuated alias, too weak to claim."""
    busy = gpipe_busy(4, 4, 0.45 / 14, 0.45, 240.0)
    t, occ = sample(busy, 1.0)
    assert measure_steps(t, occ, 1.0).period is None


def test_a_period_under_two_and_a_half_samples_is_no_claim() -> None:
    """Samples alternating every poll (a 0.2 s step at 0.1 s) fold at 0.4 s too: no claim."""
    t = np.arange(400) * 0.1
    x = np.cos(np.pi * np.arange(400))[None, :]
    assert find_period(t, x, 0.1) is None


def test_an_exact_repeat_folds_perfectly_and_the_shortest_period_wins() -> None:
    t = np.arange(900) * 0.1
    x = (np.mod(t, 0.7) < 0.3).astype(float)[None, :]
    x = x - x.mean()
    th = dispersion(t, x, np.array([0.7, 0.5]), 0.1, 4)
    assert th[0] < 1e-9 and th[1] > 0.5
    period = find_period(t, x, 0.1)
    assert period is not None and period.period_s == pytest.approx(0.7, rel=0.005)


def test_wave_order_needs_the_stages_on_one_axis() -> None:
    """Stages whose step profiles are unrelated (not one wave) give no order."""
    t = np.arange(600) * 0.1
    rows = [np.cos(2 * np.pi * t / 0.5 + ph) for ph in (0.0, 2.1, 4.2)]
    assert wave_order(t, np.array(rows), 0.5) is None
