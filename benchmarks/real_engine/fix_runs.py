"""The fixed engine against the unchanged one, load by load (run.py's fix checks).

Both engines are up; the one not driven is frozen (`_alone`). At each load the
fixed engine first serves alone, not judged (`warm_up`), then rounds of A B A
(`paired`: its run between two of the unchanged engine's) go on until the
verdict holds (`judged`, judge.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import judge as judge_mod
from client import LoadResult, drive
from engine_proc import Engine

# A fix may not lower tok/s by more than this: meant for a machine the run has to itself
# (on a shared one the A/A noise reaches 65 %, BENCHMARKS.md).
THROUGHPUT_TOLERANCE = 0.15
# Seconds an engine is given after SIGCONT before it is driven.
THAW_S = 0.5


def _alone(run: Engine, idle: Engine, model: Path, c: int, duration_s: float) -> LoadResult:
    """Drive `run` with `idle` frozen (SIGSTOP): two engines up at once share the two cores
    even when one has no requests, by a varying amount (on the machine alone, unfrozen,
    the unchanged engine's runs either side of a fix's read 53 and 132 tok/s at C=4)."""
    idle.freeze()
    run.thaw()
    time.sleep(THAW_S)
    try:
        return drive(run.url, str(model), c, duration_s, ranks={})
    finally:
        idle.thaw()


def warm_up(
    base: Engine, fixed: Engine, model: Path, c: int, duration_s: float
) -> LoadResult | None:
    """The fixed engine alone at load `c` for `duration_s`, before its rounds, not judged.

    An engine's first run at a load it has not served reads slow: in CI on 2026-12-02 a
    no-op fix's first run at C = 16 made 289 tok/s (p50 4.2 s) against the unchanged
    engine's 675 and 543, which had served C = 16 before; its later rounds 427-521
    against 413-643. The unchanged engine serves every load in the run's first part."""
    if duration_s <= 0:
        return None
    res = _alone(fixed, base, model, c, duration_s)
    print(
        f"  C={c:<3} warm-up {res.tok_per_s:7.1f} tok/s (p50 {res.latency_pct(50) or 0:.2f} s, "
        "not judged)",
        flush=True,
    )
    return res


def paired(
    base: Engine, fixed: Engine, model: Path, c: int, duration_s: float, *, again: bool = True
) -> dict[str, Any]:
    """The fixed engine between two runs of the unchanged one at the same load (A B A).

    Both engines are up; the one not driven is frozen (`_alone`). Other jobs on the
    machine change the CPU the engine gets from minute to minute: the mean of the runs
    either side of the
    fixed one cancels a drift, and their difference is the noise. `again=False` (a fix
    only reported, not judged) runs A B.
    """
    a1 = _alone(base, fixed, model, c, duration_s)
    b = _alone(fixed, base, model, c, duration_s)
    a2 = _alone(base, fixed, model, c, duration_s) if again else a1
    ref = (a1.tok_per_s + a2.tok_per_s) / 2
    run = {
        **perf(b),
        "base_tok_per_s": [a1.tok_per_s, a2.tok_per_s] if again else [a1.tok_per_s],
        "base_p50_s": [a1.latency_pct(50), a2.latency_pct(50)],
        "base_p99_s": [a1.latency_pct(99), a2.latency_pct(99)],
        "ratio": b.tok_per_s / ref if ref else float("nan"),
        "d": judge_mod.log_ratio(b.tok_per_s, a1.tok_per_s, a2.tok_per_s),
        "noise": abs(a1.tok_per_s - a2.tok_per_s) / ref if ref else float("nan"),
        "errors": b.errors[:3] + a1.errors[:1] + a2.errors[:1],
    }
    print(
        f"  C={c:<3} fixed {b.tok_per_s:7.1f} tok/s (p50 {b.latency_pct(50) or 0:.2f} s, "
        f"p99 {b.latency_pct(99) or 0:.2f} s)  unchanged {a1.tok_per_s:.1f}"
        + (f" / {a2.tok_per_s:.1f}" if again else "")
        + " tok/s",
        flush=True,
    )
    return run


def judged(
    base: Engine,
    fixed: Engine,
    model: Path,
    c: int,
    duration_s: float,
    *,
    judge: bool,
    pool: judge_mod.NoisePool,
    most: int = judge_mod.MOST_ROUNDS,
) -> dict[str, Any]:
    """A B A rounds of a judged fix at one load until its verdict holds (judge.sequential:
    1, then 3, ... up to `most`); one A B round of a fix only reported.

    Each round's A/A pair joins the run's `pool` of noise, which every later verdict
    uses. The rounds' ratios are all reported beside the verdict and its interval.
    """
    verdict: judge_mod.Judgement | None = None
    if judge:

        def one() -> tuple[dict[str, Any], tuple[float, float, float]]:
            r = paired(base, fixed, model, c, duration_s)
            a1, a2 = r["base_tok_per_s"]
            return r, (r["tok_per_s"], a1, a2)

        bound = 1.0 - THROUGHPUT_TOLERANCE
        verdict, rounds = judge_mod.sequential(one, pool, bound, most)
    else:
        rounds = [paired(base, fixed, model, c, duration_s, again=False)]
    out: dict[str, Any] = {
        **rounds[-1],
        "ratio": verdict.ratio if verdict else rounds[0]["ratio"],
        "rounds": len(rounds),
        "round_ratios": [r["ratio"] for r in rounds],
        "noise": max(r["noise"] for r in rounds),
        "errors": [e for r in rounds for e in r["errors"]],
        "per_round": rounds,
    }
    if verdict is not None:
        out.update(
            verdict=verdict.verdict,
            low=verdict.low,
            high=verdict.high,
            df=verdict.df,
            sigma_d=verdict.sigma_d,
            describe=verdict.describe(1.0 - THROUGHPUT_TOLERANCE),
        )
    return out


def perf(res: LoadResult) -> dict[str, Any]:
    return {
        "concurrency": res.concurrency,
        "tok_per_s": res.tok_per_s,
        "client_tok_per_s": res.client_tok_per_s,
        "tok_per_s_from": "engine" if res.engine_tokens is not None else "client",
        "p50_s": res.latency_pct(50),
        "p99_s": res.latency_pct(99),
        "requests": len(res.latencies_s),
        "errors": res.errors[:3],
    }
