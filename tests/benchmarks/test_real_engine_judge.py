"""The real-engine run's verdict on a fix's throughput (benchmarks/real_engine/judge.py):
its interval, its three outcomes, the rounds it asks for, and its error rates."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import t as student_t

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "real_engine"
sys.path.insert(0, str(HERE))
try:
    import fix_runs
    import judge
finally:
    sys.path.remove(str(HERE))

BOUND = 0.85


def test_the_interval_is_students_t_on_the_pooled_noise() -> None:
    pool = judge.NoisePool()
    pool.add_pair(100.0, 120.0)  # one A/A pair: one df
    ds = [math.log(0.9), math.log(1.0), math.log(1.1)]
    got = judge.judge(ds, pool, BOUND)
    mean = sum(ds) / 3
    ss = (math.log(100 / 120)) ** 2 / 2 * 1.5 + sum((x - mean) ** 2 for x in ds)
    se = math.sqrt(ss / 3 / 3)  # 3 df: the pair's one and the rounds' two
    assert got.df == 3
    assert got.ratio == pytest.approx(math.exp(mean))
    assert got.low == pytest.approx(math.exp(mean - student_t.ppf(0.95, 3) * se))
    assert got.high == pytest.approx(math.exp(mean + student_t.ppf(0.995, 3) * se))
    assert got.low < got.ratio < got.high


def test_three_outcomes_by_where_the_interval_lies() -> None:
    quiet = judge.NoisePool()
    for a in (100.0, 101.0, 99.0, 100.5):
        quiet.add_pair(a, 100.0)
    assert judge.judge([math.log(1.0)], quiet, BOUND).verdict == "safe"
    assert judge.judge([math.log(0.6)], quiet, BOUND).verdict == "costs"
    assert judge.judge([math.log(0.85)], quiet, BOUND).verdict == "unresolved"
    loud = judge.NoisePool()
    for a in (100.0, 160.0, 70.0, 130.0):
        loud.add_pair(a, 100.0)
    # The same first round on a loud machine: the run cannot tell.
    assert judge.judge([math.log(1.0)], loud, BOUND).verdict == "unresolved"
    assert judge.judge([math.log(0.6)], loud, BOUND).verdict == "unresolved"


def test_no_noise_measured_yet_is_unresolved_and_no_tokens_is_a_cost() -> None:
    j = judge.judge([math.log(1.2)], judge.NoisePool(), BOUND)
    assert (j.verdict, j.df, j.high) == ("unresolved", 0, math.inf)
    assert judge.judge([judge.log_ratio(0.0, 100.0, 90.0)], judge.NoisePool(), BOUND).verdict == (
        "costs"
    )
    with pytest.raises(ValueError, match="no rounds"):
        judge.judge([], judge.NoisePool(), BOUND)


def test_rounds_are_added_only_while_unresolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 round, then 3 (the default most) unless the first is safe; a cost needs three;
    each round's A/A pair joins the run's pool."""

    def rounds(given: list[tuple[float, float, float]]) -> Any:
        it = iter(given)

        def paired(*_a: object, **_k: object) -> dict[str, Any]:
            b, a1, a2 = next(it)
            return {
                "ratio": b / ((a1 + a2) / 2),
                "tok_per_s": b,
                "d": judge.log_ratio(b, a1, a2),
                "base_tok_per_s": [a1, a2],
                "noise": abs(a1 - a2) / ((a1 + a2) / 2),
                "errors": [],
            }

        return paired

    pool = judge.NoisePool()
    for a in (100.0, 102.0, 98.0, 101.0, 99.0, 100.0):
        pool.add_pair(a, 100.0)
    monkeypatch.setattr(fix_runs, "paired", rounds([(100.0, 99.0, 101.0)]))
    got = fix_runs.judged(None, None, Path("m"), 4, 6.0, judge=True, pool=pool)
    assert (got["rounds"], got["verdict"]) == (1, "safe")  # clear at once on a quiet run
    assert pool.df == 7

    loud = judge.NoisePool()
    given = [(100.0, 140.0, 80.0), (90.0, 70.0, 120.0), (95.0, 100.0, 100.0), (1.0, 1.0, 1.0)]
    monkeypatch.setattr(fix_runs, "paired", rounds(given))
    got = fix_runs.judged(None, None, Path("m"), 16, 6.0, judge=True, pool=loud)
    assert got["rounds"] == 3  # unresolved after one, the most after three
    assert got["verdict"] == "unresolved"
    assert got["round_ratios"] == pytest.approx([100 / 110, 90 / 95, 0.95])
    assert got["low"] < BOUND < got["high"]

    monkeypatch.setattr(fix_runs, "paired", rounds(given))
    got = fix_runs.judged(
        None, None, Path("m"), 16, 6.0, judge=True, pool=judge.NoisePool(), most=1
    )
    assert got["rounds"] == 1

    # One round far below the bound is not yet a cost (a run's noise has a heavy tail):
    # two more; a cost when they read low too, safe when they do not.
    monkeypatch.setattr(
        fix_runs, "paired", rounds([(48.0, 100.0, 100.0), (60.0, 99.0, 101.0), (58.0, 100.0, 99.0)])
    )
    got = fix_runs.judged(None, None, Path("m"), 16, 6.0, judge=True, pool=pool)
    assert (got["rounds"], got["verdict"]) == (3, "costs")
    monkeypatch.setattr(
        fix_runs,
        "paired",
        rounds([(48.0, 100.0, 100.0), (101.0, 99.0, 101.0), (99.0, 100.0, 99.0)]),
    )
    got = fix_runs.judged(None, None, Path("m"), 16, 6.0, judge=True, pool=judge.NoisePool())
    assert (got["rounds"], got["verdict"]) == (3, "unresolved")
    monkeypatch.setattr(fix_runs, "paired", rounds([(48.0, 100.0, 100.0)]))
    got = fix_runs.judged(None, None, Path("m"), 16, 6.0, judge=True, pool=pool, most=1)
    assert (got["rounds"], got["verdict"]) == (1, "costs")  # --max-rounds 1 allows it

    monkeypatch.setattr(fix_runs, "paired", rounds([(150.0, 100.0, 100.0)]))
    got = fix_runs.judged(None, None, Path("m"), 4, 6.0, judge=False, pool=judge.NoisePool())
    assert (got["rounds"], got.get("verdict")) == (1, None)  # reported, not judged


def test_the_schedule_and_its_bad_input() -> None:
    assert judge.schedule() == [1, 3]
    assert judge.schedule(5) == [1, 3, 5]
    assert judge.schedule(1) == [1]
    with pytest.raises(ValueError, match="at least 1 round"):
        judge.schedule(0)


def test_error_rates_on_simulated_runs_at_the_measured_noise() -> None:
    """At the noise of the CI runs (0.165 in log tok/s per 6 s run) and eight A/A pairs
    seen before, the rule almost never calls a no-op or a fix within the tolerance a cost,
    and calls a fix that halves the throughput one nine times in ten."""
    noop = judge.error_rates(1.0, 0.165, BOUND, trials=1500, seed=3, prior_pairs=8)
    within = judge.error_rates(0.9, 0.165, BOUND, trials=1500, seed=4, prior_pairs=8)
    halves = judge.error_rates(0.5, 0.165, BOUND, trials=1500, seed=5, prior_pairs=8)
    assert noop["costs"] <= 0.005 and within["costs"] <= 0.015
    assert noop["safe"] >= 0.3
    assert halves["costs"] >= 0.85 and halves["safe"] == 0.0
    assert noop["rounds"] <= 3.0
    # A quiet machine resolves far more: a no-op is safe, a cost of 40 % a cost.
    quiet = judge.error_rates(1.0, 0.08, BOUND, trials=1500, seed=6, prior_pairs=8)
    costly = judge.error_rates(0.6, 0.08, BOUND, trials=1500, seed=7, prior_pairs=8)
    assert quiet["safe"] >= 0.8 and costly["costs"] >= 0.95


def test_every_loads_rounds_together_resolve_what_no_one_load_can() -> None:
    """A fix that costs 30 % at each of three loads: unresolved at each on a loud run (three
    rounds apiece), a cost over the nine rounds (run.py's 'together' check)."""
    pool = judge.NoisePool()
    for a in (100.0, 125.0, 80.0, 115.0, 90.0, 120.0):
        pool.add_pair(a, 100.0)
    per_load = [
        [math.log(0.62), math.log(0.80), math.log(0.70)],
        [math.log(0.75), math.log(0.61), math.log(0.72)],
        [math.log(0.68), math.log(0.79), math.log(0.64)],
    ]
    assert [judge.judge(ds, pool, BOUND).verdict for ds in per_load] == ["unresolved"] * 3
    together = judge.judge([d for ds in per_load for d in ds], pool, BOUND)
    assert together.verdict == "costs"
    assert together.high < BOUND


def test_a_verdict_is_a_pass_a_failure_or_open(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(HERE))
    try:
        import checks as checks_mod
    finally:
        sys.path.remove(str(HERE))
    c = checks_mod.Checks()
    c.verdict("safe", "a")
    c.verdict("costs", "b")
    c.verdict("unresolved", "c")
    assert (c.passed, c.failed, c.open) == (1, ["b"], ["c"])
    assert capsys.readouterr().out.splitlines() == ["  ok   a", "  FAIL b", "  open c"]


def test_a_heavy_tail_of_slow_runs_does_not_turn_a_no_op_into_a_cost() -> None:
    """A tenth of the runs at half speed (the slow state seen in CI): a cost needs three
    rounds, so a no-op is still almost never one; with one round allowed it would be."""
    three = judge.error_rates(1.0, 0.165, BOUND, trials=1500, seed=8, prior_pairs=8, slow_share=0.1)
    one = judge.error_rates(
        1.0, 0.165, BOUND, trials=1500, seed=8, prior_pairs=8, slow_share=0.1, most=1
    )
    assert three["costs"] <= 0.005
    assert one["costs"] > 3 * max(three["costs"], 0.001)


def test_max_rounds_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(HERE))
    try:
        import run
    finally:
        sys.path.remove(str(HERE))
    assert run.main(["--max-rounds", "0"]) == 2
    assert "--max-rounds: expected at least 1, got 0" in capsys.readouterr().err


def test_the_noise_of_printed_runs_per_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(HERE))
    try:
        import noise
    finally:
        sys.path.remove(str(HERE))
    log = tmp_path / "ci.log"
    log.write_text(
        "  C=1   fixed    43.0 tok/s (p50 1.43 s, p99 1.97 s)  unchanged 40.0 / 40.0 tok/s\n"
        "  C=16  fixed   289.2 tok/s (p50 4.24 s, p99 5.74 s)  unchanged 600.0 / 500.0 tok/s\n"
        "  C=16  warm-up 745.1 tok/s (p50 1.31 s, not judged)\n"
    )
    assert noise.main([str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "C=1: 1 A/A pairs, one run's noise 0.000"
    assert (
        out[1]
        == f"C=16: 1 A/A pairs, one run's noise {abs(math.log(600 / 500)) / math.sqrt(2):.3f}"
    )
    assert noise.main([str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "empty.log").write_text("nothing here\n")
    assert noise.main([str(tmp_path / "empty.log")]) == 1
    assert "no A B A rounds" in capsys.readouterr().err
