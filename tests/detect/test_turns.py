"""Turn-taking as pipeline evidence (detect/turns.py) and layer-split captures end to end."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bubblewatch.detect import DetectOptions, Verdict, diagnose
from bubblewatch.detect.turns import turn_order, turn_taking_test
from bubblewatch.model.recording import Recording
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides

from .scenario_suite import VIA_SMI, Case, run_case

STEP_S = 0.1
KW = {
    "trend_window_s": 30.0,
    "n_surrogates": 199,
    "alpha": 0.01,
    "min_effect": 0.2,
    "max_busy_sum": 1.25,
}


def _exclusive(n_gpus: int, n: int, seed: int) -> np.ndarray:
    """Shares of one token's time, drawn at random per sample, that add up to 0.8."""
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(n_gpus), size=n).T
    return 0.8 * w


def test_exclusive_shares_take_turns():
    t = turn_taking_test(_exclusive(4, 2000, 0), STEP_S, **KW)
    assert t.significant and t.p_value <= 0.01
    assert t.busy_sum == pytest.approx(0.8)


def test_in_phase_gpus_do_not_take_turns():
    rng = np.random.default_rng(1)
    common = rng.uniform(0.1, 0.3, 2000)
    occ = common[None, :] + 0.02 * rng.standard_normal((4, 2000))
    assert not turn_taking_test(occ, STEP_S, **KW).significant


def test_independent_gpus_do_not_take_turns():
    rng = np.random.default_rng(2)
    occ = rng.uniform(0.0, 0.3, (4, 2000))
    t = turn_taking_test(occ, STEP_S, **KW)
    assert not t.significant and t.p_value > 0.01


def test_turns_that_sum_beyond_one_gpu_are_not_one_micro_batch():
    """Exchanging shares of two GPUs' worth of work (two micro-batches) is not a layer split."""
    t = turn_taking_test(2.5 * _exclusive(4, 2000, 3), STEP_S, **KW)
    assert t.busy_sum == pytest.approx(2.0)
    assert not t.significant


def test_a_busy_sum_beyond_the_bound_draws_no_surrogates():
    """The shortcut gives what the whole test gives but its null: same T, sums, order."""
    occ = 2.5 * _exclusive(4, 2000, 3)
    t = turn_taking_test(occ, STEP_S, **KW)
    full = turn_taking_test(occ, STEP_S, **{**KW, "max_busy_sum": 3.0})
    assert t.n_surrogates == 0 and full.n_surrogates == 199
    assert not t.significant and full.significant  # only the busy sum rules it out
    assert t.statistic == pytest.approx(full.statistic, abs=1e-12)
    assert (t.busy_sum, t.busy_sum_sigma, t.order) == (
        full.busy_sum,
        full.busy_sum_sigma,
        full.order,
    )
    assert "busy sum 2.00 GPU, above 1.25" in t.reason


def test_too_few_working_samples_is_no_evidence():
    t = turn_taking_test(_exclusive(3, 100, 4), STEP_S, **KW)
    assert not t.significant and "working samples" in t.reason


def test_order_from_the_edges_of_bursts():
    """GPU 2 starts first after each gap and stops first before it: it is stage 0."""
    n = 400
    x = np.zeros((3, n))
    for a, b in ((50, 150), (200, 300)):
        for stage, gpu in enumerate((2, 0, 1)):
            x[gpu, a + stage : b + stage] = 0.3
    order, ordered = turn_order(x, STEP_S)
    assert order == (2, 0, 1) and ordered


def test_order_without_a_gap_is_the_gpus_own():
    x = np.full((3, 300), 0.3)
    assert turn_order(x, STEP_S) == ((0, 1, 2), False)


def _split(n_gpus: int, stage_s: float, seed: int, why: str) -> Case:
    over = {"job.pp_size": n_gpus, "job.stage_forward_s": [stage_s]}
    return Case("layersplit4", "serialized", why, overrides=over, seed=seed)


LAYER_SPLIT = [
    _split(2, 0.12, 1, "layer split over 2 GPUs, one prompt at a time"),
    _split(3, 0.09, 2, "layer split over 3 GPUs"),
    _split(8, 0.04, 3, "layer split over 8 GPUs, stages shorter than a sample"),
    Case(
        "layersplit4",
        "serialized",
        "layer split over 4 GPUs, no gap between prompts",
        overrides={"job.stalls": []},
        seed=4,
    ),
]


def _bare(case: Case, **kw: object) -> Case:
    base = {"duration_s": 300.0, "interval_s": 0.1, "via": VIA_SMI, "bare_smi": True}
    return replace(case, drop_topology=True, **{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("case", LAYER_SPLIT, ids=lambda c: c.why)
def test_layer_split_from_bare_nvidia_smi(case: Case, tmp_path):
    """Regression: at 0.1 s these read in phase (not_pipeline), or a stagger in the wrong order."""
    d = diagnose(run_case(_bare(case), str(tmp_path)))
    n = int(case.overrides.get("job.pp_size", 4))
    assert d.verdict is Verdict.SERIALIZED, d.evidence.get("inference")
    assert d.evidence["pipeline_evidence"] == "turn_taking"
    assert d.evidence["inferred_stages"] == [[g] for g in range(n)]
    assert "layer-split model parallelism" in str(d.evidence["job"])


@pytest.mark.slow
def test_loading_phase_alone_is_idle(tmp_path):
    case = _bare(Case("layersplit4", "idle", "loading"), duration_s=55.0, seed=6)
    d = diagnose(run_case(case, str(tmp_path)))
    assert d.verdict is Verdict.IDLE


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["dp8", "tp8", "dp8-training", "pp8-serialized"])
def test_no_turn_taking_elsewhere(scenario: str, tmp_path):
    """Replicas, TP groups and an engine whose waiting ranks spin never read as a layer split."""
    d = diagnose(run_case(_bare(Case(scenario, "", ""), duration_s=120.0), str(tmp_path)))
    assert d.evidence["pipeline_evidence"] != "turn_taking"


def _split_window(seed: int, **over: object) -> Recording:
    """One process's layer split over 3 GPUs at 0.1 s (as test_no_engine's), no topology."""
    sc = apply_overrides(
        load_scenario("layersplit4"),
        {"job.pp_size": 3, "job.stage_forward_s": [0.09], "job.loading_s": 0.0, **over},
    )
    return replace(
        observe(simulate(sc, duration_s=150.0, seed=seed), 0.1, seed=seed), topology=None
    )


def _placed(rec: Recording, gpus: tuple[int, ...]) -> Recording:
    """`rec` with stage s's telemetry on GPU gpus[s] (the layers placed in that order)."""
    series = {g: replace(rec.series[s], gpu=g) for s, g in enumerate(gpus)}
    return replace(rec, series=series)


PLACED = (2, 0, 1)  # e.g. CUDA_VISIBLE_DEVICES=2,0,1, or -ts 1,3,2 with memory to match


def test_a_permuted_gpu_order_is_recovered_from_the_turns_and_the_placement():
    rec = _placed(_split_window(2), PLACED)
    d = diagnose(rec)
    assert d.verdict is Verdict.SERIALIZED
    assert d.evidence["inferred_stages"] == [[g] for g in PLACED]
    assert d.evidence["stage_order_source"] == "turns"
    placed = DetectOptions(layer_order=PLACED, layer_order_resolved=True)
    d = diagnose(rec, options=placed)
    assert d.evidence["inferred_stages"] == [[g] for g in PLACED]
    assert d.evidence["stage_order_source"] == "layer placement; the turns agree"
    # A device-order prior that the turns contradict gives way to them.
    prior = DetectOptions(layer_order=(0, 1, 2), layer_order_resolved=False)
    assert diagnose(rec, options=prior).evidence["inferred_stages"] == [[g] for g in PLACED]


def test_without_idle_gaps_only_the_placement_orders_the_stages():
    """No pause between prompts: no burst edges, so the turns cannot say which GPU is first."""
    rec = _placed(_split_window(4, **{"job.stalls": []}), PLACED)
    d = diagnose(rec)
    assert d.verdict is Verdict.SERIALIZED
    assert d.evidence["stage_order_source"] == "gpu index"
    d = diagnose(rec, options=DetectOptions(layer_order=PLACED, layer_order_resolved=True))
    assert d.evidence["inferred_stages"] == [[g] for g in PLACED]
    assert d.evidence["stage_order_source"] == "layer placement"
