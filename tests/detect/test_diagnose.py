"""The signatures of docs/detection.md on hand-built telemetry that follows the physics."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from bubblewatch.detect import EVIDENCE_KEYS, DetectOptions, LoadContext, Verdict, diagnose
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.model.topology import Topology

from .synth import make_recording


def test_serialized_under_load_is_a_configuration_problem():
    d = diagnose(make_recording("serialized", pp=4))
    assert d.verdict is Verdict.SERIALIZED
    assert d.load_limited is False
    ev = d.evidence
    assert ev["signal"] == "sm_active"
    # Only one stage computes at a time: occupancies sum to about 1, each about 1/P.
    assert 0.8 <= ev["concurrency"] <= 1.35
    assert ev["bubble_ratio"] == pytest.approx(1 - ev["concurrency"] / 4, abs=1e-3)
    assert all(abs(s.occupancy_ratio - 0.25) < 0.1 for s in d.stages)
    # The prefill wave reaches stage s+1 one stage-time (0.4 s) after stage s.
    lags = [s.lag_s for s in d.stages]
    assert lags == sorted(lags) and lags[0] == 0.0
    # At 0.5 s sampling a 0.4 s stage time is resolved to within a fraction of a step.
    assert lags[3] == pytest.approx(1.2, abs=0.3)
    assert ev["lag_rank_correlation"] == pytest.approx(1.0)
    assert ev["topology_agreement"] is True
    # Waiting ranks spin: kernels busy, SMs idle, for about 3/4 of the time.
    assert ev["spin_ratio"] > 0.6
    assert ev["bubble_energy_j"] > 0


def test_serialized_with_one_request_is_load_limited():
    d = diagnose(make_recording("serialized", pp=4, running=1, queued=0))
    assert d.verdict is Verdict.SERIALIZED
    assert d.load_limited is True


def test_serialized_with_unknown_load_says_so():
    d = diagnose(make_recording("serialized", pp=4, running=None, queued=None))
    assert d.verdict is Verdict.SERIALIZED
    assert d.load_limited is None
    assert d.evidence["running_requests"] is None


def test_serialized_graphs_off_adds_launch_bound():
    d = diagnose(make_recording("serialized", pp=8, launch_bound=True))
    assert d.verdict is Verdict.SERIALIZED
    assert d.has(Verdict.LAUNCH_BOUND)
    assert d.evidence["launch_bound_index"] >= 0.5


def test_healthy_pipeline():
    d = diagnose(make_recording("pipelined", pp=4, k=8))
    assert d.verdict is Verdict.HEALTHY
    assert d.evidence["concurrency"] > 3.0
    assert d.evidence["bubble_ratio"] < 0.25
    assert not d.has(Verdict.SERIALIZED)


def test_launch_bound_pipeline():
    d = diagnose(make_recording("pipelined", pp=8, k=8, launch_bound=True))
    assert d.verdict is Verdict.LAUNCH_BOUND
    assert d.evidence["launch_bound_index"] > 0.6
    assert not d.has(Verdict.SERIALIZED)


def test_idle_is_not_a_bubble():
    d = diagnose(make_recording("idle", pp=4, running=0, queued=0))
    assert d.verdict is Verdict.IDLE
    assert d.evidence["idle_power_source"] == ["gpu_idle_samples"]
    assert d.stages[0].idle_power_w == pytest.approx(85.0, abs=3)


def test_idle_without_load_information():
    d = diagnose(make_recording("idle", pp=4, running=None, queued=None))
    assert d.verdict is Verdict.IDLE


def test_tensor_parallel_is_not_a_pipeline():
    d = diagnose(make_recording("pipelined", pp=1, tp=8, k=8))
    assert d.verdict is Verdict.NOT_PIPELINE
    assert d.evidence["pp_size"] == 1


def test_tp_without_topology_is_one_group_and_not_a_pipeline():
    rec = make_recording("pipelined", pp=1, tp=8, k=8, topology=False, interval_s=0.1, noise=0.005)
    d = diagnose(rec)
    assert d.verdict is Verdict.NOT_PIPELINE
    assert d.evidence["inferred_stages"] == [list(range(8))]


def test_independent_replicas_without_topology_are_not_a_pipeline():
    # Data parallel: eight single-GPU engines, each busy on its own load.
    reps = [make_recording("pipelined", pp=1, k=8, seed=s, topology=False) for s in range(8)]
    base = reps[0]
    series = {
        g: replace(r.series[0], gpu=g, t_s=r.series[0].t_s + 0.01 * g) for g, r in enumerate(reps)
    }
    rec = replace(base, series=series, gpus=tuple(GpuInfo(g) for g in range(8)))
    d = diagnose(rec)
    assert d.verdict is Verdict.NOT_PIPELINE
    assert not d.has(Verdict.SERIALIZED)


def test_imbalanced_stage():
    d = diagnose(make_recording("pipelined", pp=4, k=8, weights=[1, 1, 1.6, 1]))
    assert d.verdict is Verdict.IMBALANCED
    assert d.evidence["imbalanced_stage"] == 2
    assert d.evidence["imbalance_ratio"] > 1.25
    assert d.finding(Verdict.IMBALANCED).stage == 2


def test_throttled_gpu_is_a_straggler():
    rec = make_recording("pipelined", pp=4, k=8, weights=[1, 1.3, 1, 1], throttle_gpu=1)
    d = diagnose(rec)
    assert d.verdict is Verdict.STRAGGLER
    f = d.finding(Verdict.STRAGGLER)
    assert f.gpu == 1 and f.stage == 1
    assert f.evidence["throttle_reasons"] == ["sw_power_cap"]
    assert d.evidence["straggler_gpu"] == 1


def test_power_only_falls_back_with_lower_confidence():
    with_sm = diagnose(make_recording("serialized", pp=4))
    power_only = diagnose(make_recording("serialized", pp=4, with_sm=False))
    assert power_only.verdict is Verdict.SERIALIZED
    assert power_only.evidence["signal"] == "power"
    assert power_only.confidence < with_sm.confidence
    healthy = diagnose(make_recording("pipelined", pp=4, k=8, with_sm=False))
    assert healthy.verdict is Verdict.HEALTHY


@pytest.mark.parametrize("interval_s", [0.1, 0.5, 1.0, 2.0])
def test_sampling_intervals_from_100ms_to_2s(interval_s):
    dur = 120.0 if interval_s >= 1.0 else 60.0
    ser = diagnose(make_recording("serialized", pp=4, interval_s=interval_s, duration_s=dur))
    ok = diagnose(make_recording("pipelined", pp=4, k=8, interval_s=interval_s, duration_s=dur))
    assert ser.verdict is Verdict.SERIALIZED
    assert ok.verdict is Verdict.HEALTHY


@pytest.mark.parametrize("pp", [2, 8, 16])
def test_pipeline_sizes(pp):
    ser = diagnose(make_recording("serialized", pp=pp, duration_s=90.0))
    ok = diagnose(make_recording("pipelined", pp=pp, k=pp, duration_s=90.0))
    assert ser.verdict is Verdict.SERIALIZED
    assert ok.verdict is Verdict.HEALTHY


def test_tp_groups_are_averaged_and_disagreement_noted():
    d = diagnose(make_recording("serialized", pp=4, tp=2))
    assert d.verdict is Verdict.SERIALIZED
    assert [s.gpus for s in d.stages] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all(s.to_dict()["tp_disagreement"] < 0.05 for s in d.stages)


def test_no_topology_infers_stage_order_and_tp_groups():
    rec = make_recording("serialized", pp=4, tp=2, topology=False, interval_s=0.1)
    # Shuffle GPU numbering so the order must come from the lags, not the indices.
    perm = {0: 5, 1: 4, 2: 0, 3: 1, 4: 7, 5: 6, 6: 2, 7: 3}
    series = {perm[g]: replace(s, gpu=perm[g]) for g, s in rec.series.items()}
    rec = replace(rec, series=series, gpus=tuple(sorted(rec.gpus, key=lambda g: g.index)))
    d = diagnose(rec)
    assert d.verdict is Verdict.SERIALIZED
    inferred = [sorted(s) for s in d.evidence["inferred_stages"]]
    assert inferred == [[4, 5], [0, 1], [6, 7], [2, 3]]
    assert d.evidence["inferred_topology_confidence"] > 0.5
    assert d.evidence["topology_agreement"] is None


def test_lags_at_100ms_sampling_are_precise():
    d = diagnose(make_recording("serialized", pp=4, interval_s=0.1))
    assert [s.lag_s for s in d.stages] == pytest.approx([0.0, 0.4, 0.8, 1.2], abs=0.05)


def test_wrong_topology_is_flagged():
    rec = make_recording("serialized", pp=4, interval_s=0.1)
    reversed_topo = Topology(stages=((3,), (2,), (1,), (0,)))
    d = diagnose(rec, reversed_topo)
    assert d.evidence["topology_agreement"] is False
    assert d.evidence["lag_rank_correlation"] == pytest.approx(-1.0)


def test_explicit_load_overrides_the_recording():
    rec = make_recording("serialized", pp=4, running=8, queued=2)
    d = diagnose(rec, load=LoadContext(running=1.0, queued=0.0))
    assert d.load_limited is True


def test_uneven_and_missing_samples():
    rec = make_recording("serialized", pp=4, interval_s=0.2)
    rng = np.random.default_rng(5)
    series = {}
    for g, s in rec.series.items():
        keep = rng.random(len(s)) > 0.2  # drop a fifth of the samples
        jitter = rng.uniform(-0.03, 0.03, len(s))
        t = np.sort(s.t_s + jitter)[keep]
        series[g] = GpuSeries(g, t, {m: v[keep] for m, v in s.values.items()})
    d = diagnose(replace(rec, series=series))
    assert d.verdict is Verdict.SERIALIZED


def test_insufficient_data_reasons():
    rec = make_recording("serialized", pp=4)
    short = diagnose(rec.window(rec.start_s, rec.start_s + 5))
    assert short.verdict is Verdict.INSUFFICIENT_DATA
    assert "shorter than" in short.evidence["reason"]

    few = diagnose(rec, options=DetectOptions(min_samples_per_gpu=1000))
    assert few.verdict is Verdict.INSUFFICIENT_DATA
    assert "fewer than 1000 samples" in few.evidence["reason"]

    only_clocks = {
        g: GpuSeries(g, s.t_s, {Metric.SM_CLOCK_MHZ: s.values[Metric.SM_CLOCK_MHZ]})
        for g, s in rec.series.items()
    }
    blind = diagnose(replace(rec, series=only_clocks))
    assert blind.verdict is Verdict.INSUFFICIENT_DATA
    assert "neither SM activity nor power" in blind.evidence["reason"]

    missing = diagnose(rec, Topology.from_sizes(5, 1))
    assert missing.verdict is Verdict.INSUFFICIENT_DATA
    assert "[4]" in missing.evidence["reason"]

    empty = diagnose(Recording(gpus=(), series={}))
    assert empty.verdict is Verdict.INSUFFICIENT_DATA


def test_every_diagnosis_carries_the_evidence_contract_and_serialises():
    for rec in (
        make_recording("serialized", pp=4),
        make_recording("idle", pp=2, running=0, queued=0),
        make_recording("serialized", pp=4, duration_s=5),
    ):
        d = diagnose(rec)
        assert set(EVIDENCE_KEYS) <= set(d.evidence)
        out = json.loads(json.dumps(d.to_dict(), allow_nan=False))
        assert out["verdict"] == d.verdict.value
        assert all(0.0 <= f["confidence"] <= 1.0 for f in out["findings"])


def test_noise_does_not_turn_healthy_into_serialized():
    for seed in range(5):
        d = diagnose(make_recording("pipelined", pp=8, k=8, noise=0.04, seed=seed))
        assert d.verdict is Verdict.HEALTHY, seed
