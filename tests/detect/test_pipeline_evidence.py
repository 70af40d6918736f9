"""Pipeline evidence without a topology: in-phase groups, and a stagger chance cannot explain."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect.groups import in_phase_groups
from bubblewatch.detect.infer import infer_topology
from bubblewatch.detect.stagger import stagger_test
from bubblewatch.detect.thresholds import DetectOptions

OPTS = DetectOptions()
STEP = 0.1


def _ar1(n: int, rng: np.random.Generator, phi: float = 0.9) -> np.ndarray:
    """A red-noise series like real load fluctuations (autocorrelated, not periodic)."""
    e = rng.normal(size=n)
    out = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + e[i]
        out[i] = acc
    return out


def _level(x: np.ndarray, mean: float = 0.5, spread: float = 0.1) -> np.ndarray:
    return np.clip(mean + spread * (x - x.mean()) / x.std(), 0.0, 1.0)


def test_gpus_working_in_phase_form_one_group_despite_noise() -> None:
    rng = np.random.default_rng(1)
    common = _ar1(600, rng)
    # DP ranks at 10 Hz: same steps, each with its own measurement noise (r ~ 0.5)
    occ = np.stack([_level(common + 0.9 * _ar1(600, rng, 0.3)) for _ in range(8)])
    grp = in_phase_groups(
        tuple(range(8)),
        [occ],
        occupancy=occ,
        kernel_busy=None,
        memory_b=None,
        step_s=STEP,
        options=OPTS,
    )
    assert grp.groups == (tuple(range(8)),) and not grp.coherent


def test_independent_gpus_stay_apart_and_idle_ones_take_no_part() -> None:
    rng = np.random.default_rng(2)
    occ = np.stack([_level(_ar1(600, rng)) for _ in range(4)] + [np.zeros(600)])
    kb = np.vstack([np.full((4, 600), 0.7), np.zeros((1, 600))])
    grp = in_phase_groups(
        tuple(range(5)),
        [occ],
        occupancy=occ,
        kernel_busy=kb,
        memory_b=None,
        step_s=STEP,
        options=OPTS,
    )
    assert grp.groups == ((0,), (1,), (2,), (3,)) and grp.idle_gpus == (4,)
    assert grp.coherent  # four equal groups: a shape a pipeline could have


def test_a_leading_gpu_is_not_in_phase_and_memory_or_level_split_groups() -> None:
    rng = np.random.default_rng(3)
    base = _ar1(700, rng)
    lead = _level(base[3:]) + 0.01 * rng.normal(size=697)
    follow = _level(base[:-3]) + 0.01 * rng.normal(size=697)  # the same, 3 steps later
    occ = np.stack([lead, follow])
    grp = in_phase_groups(
        (0, 1), [occ], occupancy=occ, kernel_busy=None, memory_b=None, step_s=STEP, options=OPTS
    )
    assert grp.groups == ((0,), (1,))  # neighbouring stages lead one another: lopsided
    same = np.stack([lead, lead + 0.01 * rng.normal(size=697)])
    mem = np.vstack([np.full((1, 697), 31e9), np.full((1, 697), 41e9)])
    split = in_phase_groups(
        (0, 1), [same], occupancy=same, kernel_busy=None, memory_b=mem, step_s=STEP, options=OPTS
    )
    assert split.groups == ((0,), (1,))  # 31 GB vs 41 GB in use: different jobs or stages
    low = np.stack([same[0], 0.2 * same[1]])
    assert (
        len(
            in_phase_groups(
                (0, 1),
                [low],
                occupancy=low,
                kernel_busy=None,
                memory_b=None,
                step_s=STEP,
                options=OPTS,
            ).groups
        )
        == 2
    )


def _stagger(signals: np.ndarray) -> object:
    return stagger_test(
        signals,
        STEP,
        max_lag_s=OPTS.max_lag_s,
        n_surrogates=OPTS.stagger_surrogates,
        alpha=OPTS.stagger_alpha,
        min_effect=OPTS.stagger_min_effect,
    )


def test_stagger_found_in_a_pipeline_and_not_in_chance() -> None:
    rng = np.random.default_rng(4)
    base = _ar1(1200, rng)
    # three stages taking turns: each the one before it, 4 steps later, minus it now
    stages = np.stack(
        [base[8 - 4 * s : 1200 - 4 * s] - 0.5 * base[8:1200] * (s > 0) for s in range(3)]
    )
    stages = stages + 0.2 * rng.normal(size=stages.shape)
    found = _stagger(stages)
    assert found.significant and found.p_value <= 0.01 and found.excess >= 0.1
    independent = np.stack([_ar1(1192, rng) for _ in range(3)])
    assert not _stagger(independent).significant
    in_phase = np.stack([base[:1192] + 0.3 * rng.normal(size=1192) for _ in range(3)])
    assert not _stagger(in_phase).significant


def test_stagger_needs_enough_samples_and_must_be_steady() -> None:
    rng = np.random.default_rng(5)
    base = _ar1(1200, rng)
    short = np.stack([base[10:160], base[6:156]])  # 150 points: too short for two chunks
    assert not _stagger(short).significant
    # a lagged coupling during one episode only (a checkpoint), noise elsewhere
    a = _ar1(1200, rng)
    b = _ar1(1200, rng)
    b[:300] = a[5:305] * 3.0
    a[:300] *= 3.0
    assert not _stagger(np.stack([a, b])).significant


def test_infer_topology_says_why() -> None:
    rng = np.random.default_rng(6)
    base = _ar1(1200, rng)
    stages = np.stack(
        [base[8 - 4 * s : 1200 - 4 * s] - 0.5 * base[8:1200] * (s > 0) for s in range(3)]
    )
    occ = np.clip(0.4 + 0.1 * (stages + 0.2 * rng.normal(size=stages.shape)), 0, 1)
    inf = infer_topology((0, 1, 2), occ, STEP, OPTS)
    assert inf.is_pipeline and inf.stages == ((0,), (1,), (2,)) and inf.stagger is not None
    assert "staggered beyond chance" in inf.reason
    dp = np.clip(0.6 + 0.05 * (base[:1192] + 0.3 * rng.normal(size=(4, 1192))), 0, 1)
    inf = infer_topology((0, 1, 2, 3), dp, STEP, OPTS)
    assert not inf.is_pipeline and inf.groups == ((0, 1, 2, 3),)
    assert "in phase" in inf.reason


@pytest.mark.parametrize("sizes", [(2, 1), (3, 1, 1)])
def test_groups_of_unequal_size_are_not_stages(sizes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(7)
    rows = []
    for size in sizes:
        common = _ar1(800, rng)
        rows += [_level(common + 0.2 * rng.normal(size=800)) for _ in range(size)]
    occ = np.stack(rows)
    inf = infer_topology(tuple(range(len(rows))), occ, STEP, OPTS)
    assert not inf.is_pipeline and not inf.coherent and "unequal size" in inf.reason
