"""No recommendation makes things worse at any load (issue 18), on a small grid.

The full grid is `benchmarks/advice_safety.py` (BENCHMARKS.md). Here: two
serving scenarios x 8 and 64 requests x CUDA graphs off/on, 60 s each, with
128-token outputs so that requests finish several times within the run and
the end-to-end latency measures something.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from bubblewatch.sim.scenario import apply_overrides

from ._load import load_benchmark

OVERRIDES = {"workload.output_tokens": 128}


@pytest.fixture(scope="module")
def safety() -> ModuleType:
    return load_benchmark("advice_safety", "bw_advice_safety")


@pytest.mark.slow
def test_no_recommendation_lowers_throughput_or_raises_p99_latency(safety: ModuleType) -> None:
    rows = safety.run(
        ("pp8-serialized", "pp8-async"),
        (8, 64),
        (False, True),
        duration_s=60.0,
        overrides=OVERRIDES,
    )
    applied = [r for r in rows if r.variant != "unchanged"]
    # Not vacuous: the fill fix, the graphs fix and the combined command are all measured.
    assert {"PipelineSerializedUnderLoad", "all together"} <= {r.variant for r in applied}
    assert len(applied) >= 10
    unsafe = [
        (r.scenario, r.concurrency, r.graphs, r.variant, round(r.throughput_ratio, 3))
        for r in applied
        if not r.safe
    ]
    assert not unsafe


def test_the_bound_catches_a_cap_that_starves_the_load(safety: ModuleType) -> None:
    """The trap the old fill fix set: cap 1 under 64 requests is outside the bound."""
    from bubblewatch.sim import load_scenario

    sc = apply_overrides(load_scenario("pp8-serialized"), {**OVERRIDES, "workload.concurrency": 64})
    base = safety.measure(sc, 30.0, 0)
    capped = safety.measure(apply_overrides(sc, {"parallel.pp_max_micro_batch_size": 1}), 30.0, 0)
    row = safety.Row("pp8-serialized", 64, False, "cap 1", capped, base)
    assert row.throughput_ratio < 0.5 and not row.safe
