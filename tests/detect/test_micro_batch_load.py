"""Load from a gauge that counts one micro-batch (SGLang with PP) in the load_limited call.

Regression: the detector read SGLang's per-micro-batch `num_running_reqs` as all
running requests, so a pipeline of several single-request micro-batches read
`load_limited: true` on a gauge of about 1.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bubblewatch.detect import DetectOptions, LoadContext, Verdict, diagnose
from bubblewatch.detect.context import load_limited, running_requests, running_source
from bubblewatch.model.recording import LoadSeries, Recording
from bubblewatch.rules import build_facts, recommend
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sinks.report import render_report
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.engine_config import EngineConfig


def _sim(name: str, overrides: dict[str, object], seed: int = 0) -> tuple[Recording, float]:
    """The recording (load as the engine's endpoint shows it) and the true mean running."""
    sc = load_scenario(name)
    res = simulate(apply_overrides(sc, overrides) if overrides else sc, duration_s=60.0, seed=seed)
    return observe(res, interval_s=1.0, seed=seed), res.truth.replicas[0].mean_running


def _without_micro_batch(rec: Recording, running: np.ndarray | None = None) -> Recording:
    load = rec.load
    return replace(
        rec, load=LoadSeries(load.t_s, load.running if running is None else running, load.queued)
    )


@pytest.fixture(scope="module")
def five_slots_of_one() -> tuple[Recording, float]:
    # The seed's PP8 with graphs on and the per-slot cap at 1: five requests, five
    # micro-batches of one in flight; SGLang's gauge shows one of them.
    return _sim(
        "pp8-serialized",
        {
            "workload.concurrency": 5,
            "parallel.pp_max_micro_batch_size": 1,
            "parallel.cuda_graph": True,
        },
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_slots_of_one_request_under_load_are_not_load_limited(seed, five_slots_of_one):
    rec, true_running = (
        five_slots_of_one
        if seed == 0
        else _sim(
            "pp8-serialized",
            {
                "workload.concurrency": 5,
                "parallel.pp_max_micro_batch_size": 1,
                "parallel.cuda_graph": True,
            },
            seed=seed,
        )
    )
    assert rec.load.micro_batch is not None and np.nanmean(rec.load.micro_batch) < 1.0
    assert true_running == pytest.approx(5.0, abs=0.1)
    d = diagnose(rec)
    assert d.verdict is Verdict.SERIALIZED
    assert d.load_limited is False
    ev = d.evidence
    assert ev["running_requests_source"] == "micro_batch_estimate"
    assert ev["micro_batch_requests"] < 1.0
    # At least one request in each micro-batch in flight, never more than run.
    k = ev["micro_batches_in_flight"]
    assert k > 2.0
    assert ev["running_requests"] == pytest.approx(ev["micro_batch_requests"] * k, abs=0.01)
    assert 1.5 < ev["running_requests"] <= true_running
    # The same window read with the engine's true count agrees; the gauge alone did not.
    truth = np.full(len(rec.load), true_running)
    assert diagnose(_without_micro_batch(rec, truth)).load_limited is False
    assert diagnose(_without_micro_batch(rec)).load_limited is True


def test_a_single_request_is_still_load_limited():
    rec, true_running = _sim("pp8-single-request", {})
    assert true_running == pytest.approx(1.0, abs=0.05)
    d = diagnose(rec)
    assert d.verdict is Verdict.SERIALIZED and d.load_limited is True
    ev = d.evidence
    assert ev["running_requests_source"] == "micro_batch_estimate"
    assert ev["micro_batch_requests"] <= 1.0
    assert ev["running_requests"] <= 1.5
    finding = d.finding(Verdict.SERIALIZED)
    assert finding is not None and finding.evidence["micro_batch_requests"] <= 1.0
    assert "too few requests" in finding.summary
    text = render_report(d)
    assert "(estimated from one micro-batch x micro-batches in flight)" in text
    assert "requests per micro-batch (engine)" in text


def test_all_requests_in_one_micro_batch_size_the_per_slot_cap(five_slots_of_one):
    """The seed: eight requests in one micro-batch; the cap that spreads them is 1."""
    rec, _ = _sim("pp8-serialized", {})
    d = diagnose(rec)
    assert d.verdict is Verdict.SERIALIZED and d.load_limited is False
    ev = d.evidence
    assert ev["micro_batch_requests"] > 7.0  # 0 until the first decode is logged, then 8
    engine = _engine(rec)
    facts = build_facts(d, engine, rec.topology, gpus=rec.gpus)
    assert facts.get("derived.requests_per_micro_batch") == pytest.approx(
        ev["micro_batch_requests"]
    )
    recs = {r.rule: r for r in recommend(d, engine, rec.topology, gpus=rec.gpus)}
    cap = recs["PipelineSerializedUnderLoad"]
    assert cap.command is not None and "--pp-max-micro-batch-size 1" in cap.command
    assert "about 7 per micro-batch in flight" in cap.summary
    # Five micro-batches of one: the measured size says so, not running / concurrency.
    rec5 = five_slots_of_one[0]
    facts5 = build_facts(diagnose(rec5), _engine(rec5), rec5.topology, gpus=rec5.gpus)
    assert facts5.get("derived.requests_per_micro_batch") < 1.0


def _engine(rec: Recording) -> EngineConfig:
    assert rec.topology is not None
    engine = parse_engine_cmdline(list(rec.topology.argv), dict(rec.topology.env), version="0.5.11")
    assert engine is not None
    return engine


def test_running_requests_by_hand():
    o = DetectOptions()
    gauge = LoadContext(running=1.0, queued=0.0)
    per_mb = LoadContext(running=1.0, queued=0.0, micro_batch=1.0)
    assert running_requests(gauge, 4.0) == 1.0 and running_source(gauge, 4.0) == "gauge"
    assert running_requests(per_mb, 4.0) == 4.0
    assert running_source(per_mb, 4.0) == "micro_batch_estimate"
    # Fewer than one micro-batch in flight still holds the one the gauge counted.
    assert running_requests(per_mb, 0.6) == 1.0
    # No pipeline to count micro-batches in: the gauge, said to be a lower bound.
    assert running_requests(per_mb, None) == 1.0
    assert running_source(per_mb, None) == "micro_batch_lower_bound"
    assert load_limited(gauge, 4.0, o) is True
    assert load_limited(per_mb, 4.0, o) is False
    assert load_limited(per_mb, 1.0, o) is True
    assert load_limited(LoadContext(), 1.0, o) is None
    assert running_source(LoadContext(), 1.0) is None
