"""The simulator's latency figures: TTFT, ITL and end-to-end per request (issue 18)."""

from __future__ import annotations

import numpy as np

from bubblewatch.sim import load_scenario
from bubblewatch.sim.replica import run_replica
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sim.simulate import replica_phases, replica_stages


def _run(overrides: dict[str, object], duration_s: float):  # type: ignore[no-untyped-def]
    sc = apply_overrides(load_scenario("pp8-serialized"), overrides)
    return run_replica(
        sc, replica_stages(sc, 0), replica_phases(sc, 0), duration_s, np.random.default_rng(0)
    )


def test_every_token_is_a_first_token_or_a_gap() -> None:
    rep = _run({"workload.concurrency": 4, "workload.output_tokens": 32}, 20.0)
    # Nothing is left waiting at C=4, so every TTFT is a measured one.
    assert rep.ttft_s.size + rep.itl_s.size == rep.tokens
    assert (rep.ttft_s > 0).all() and (rep.itl_s > 0).all()
    # A finished request's latency is its first token plus its gaps: well above TTFT
    # (requests still open at the end count with their time so far, which can be short).
    assert rep.e2e_s.size > 4
    assert float(np.median(rep.e2e_s)) > float(np.median(rep.ttft_s)) + 20 * float(
        np.median(rep.itl_s)
    )


def test_a_request_starved_behind_the_cap_counts_with_its_wait() -> None:
    """A request that never got a slot is not left out of the p99 (a lower bound)."""
    rep = _run(
        {
            "workload.concurrency": 64,
            "workload.length_jitter_ratio": 0.0,
            "parallel.pp_max_micro_batch_size": 1,
        },
        20.0,
    )
    # 8 slots x 1 run; 56 wait the whole 20 s: their TTFT is at least 20 s minus arrival.
    assert int((rep.ttft_s >= 19.0).sum()) >= 50
    assert float(np.percentile(rep.e2e_s, 99)) >= 19.0
