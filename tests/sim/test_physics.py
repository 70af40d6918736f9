"""The engine model's physics: pipeline occupancy, serialization, spin, throttling, imbalance."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE, CLOCKS_EVENT_SW_POWER_CAP, Metric
from bubblewatch.sim import SimResult, load_scenario, observe, simulate
from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sim.scenario import apply_overrides


def _ideal_pp4(k: int) -> SimResult:
    """PP4, equal stages, no CPU or link costs, k single-request micro-batches, decode only.

    A per-slot cap of 1 puts each request in its own slot; k > 4 needs k - 4 more slots
    (depth), since SGLang cycles over pp_size + depth slots.
    """
    sc = apply_overrides(
        load_scenario("pp4-imbalanced"),
        {
            "model.layers": 60,
            "parallel.layer_partition": None,
            "parallel.pp_async_batch_depth": max(k - 4, 0),
            "parallel.pp_max_micro_batch_size": 1,
            "hardware.host.batch_prep_s": 0.0,
            "hardware.host.pp_hop_s": 0.0,
            "hardware.host.step_overhead_s": 0.0,
            "hardware.interconnect.latency_s": 0.0,
            "workload.concurrency": k,
            "workload.input_tokens": 1,
            "workload.output_tokens": 100000,
            "workload.length_jitter_ratio": 0.0,
        },
    )
    return simulate(sc, duration_s=5.0, seed=0)


@pytest.mark.parametrize("k", [1, 2, 4, 6])
def test_steady_decode_busy_is_min_1_k_over_p(k: int) -> None:
    res = _ideal_pp4(k)
    busy = [s.busy_ratio for s in res.truth.stages]
    assert busy == pytest.approx([min(1.0, k / 4)] * 4, abs=0.03)
    # With depth, the slot whose result was just processed is being scheduled again:
    # k slots hold k - 1 micro-batches in flight, still enough for four stages.
    expected = k if k <= 4 else k - 1
    assert res.truth.replicas[0].mean_in_flight == pytest.approx(expected, abs=0.05)


def test_serialized_only_one_stage_at_a_time(serialized: SimResult) -> None:
    rep = serialized.truth.replicas[0]
    assert rep.max_in_flight == 1
    assert 0.6 < rep.busy_sum <= 1.0
    per_stage = np.array([serialized.truth.stage(s).busy_ratio for s in range(8)])
    assert per_stage.max() < 0.2
    # The seed's power band: 150-200 W of 600 W on every GPU.
    assert all(150 <= s.power_w <= 200 for s in serialized.truth.stages)


def test_serialized_cells_never_overlap() -> None:
    res = simulate(load_scenario("pp8-serialized"), duration_s=5.0, seed=1)
    # SM activity above the spin level is compute; per cell it adds up to at most one stage.
    sm = res.timeline.field("sm_active").astype(float)
    spin_sm = res.scenario.spin.sm_active_ratio
    compute_like = np.clip(sm - spin_sm, 0, None)
    assert float(compute_like.sum(axis=0).max()) <= 1.0


def test_spin_counts_as_kernel_busy_not_sm_active(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=0.5, seed=0, noise_ratio=0.0)
    for g in range(1, 8):
        s = rec.series[g]
        kb = s.values[Metric.KERNEL_BUSY_RATIO]
        sm = s.values[Metric.SM_ACTIVE_RATIO]
        assert np.nanmedian(kb) >= 0.97
        assert np.nanmedian(sm) < 0.15
        assert np.nanmedian(s.values[Metric.POWER_AVG_W]) > 140  # spinning is above idle
    for st in serialized.truth.stages:
        assert st.spin_ratio > 0.8


def test_no_spin_when_disabled() -> None:
    sc = apply_overrides(load_scenario("pp8-serialized"), {"spin.enabled": False})
    res = simulate(sc, duration_s=5.0, seed=0)
    assert all(s.spin_ratio == 0.0 for s in res.truth.stages)
    assert all(s.kernel_busy_ratio < 0.3 for s in res.truth.stages)
    # Without busy-waiting the GPUs would sit below the seed's 150-200 W band.
    assert all(s.power_w < 140 for s in res.truth.stages)


def test_stage0_spin_is_configurable() -> None:
    sc = apply_overrides(load_scenario("pp8-serialized"), {"spin.stage0": False})
    res = simulate(sc, duration_s=5.0, seed=0)
    assert res.truth.stage(0).spin_ratio == 0.0
    assert res.truth.stage(1).spin_ratio > 0.8


def test_throttled_gpu_is_slow_and_flagged(throttled: SimResult) -> None:
    stages = throttled.truth.stages
    slow = throttled.truth.stage(2)
    assert slow.mean_stage_time_s == max(s.mean_stage_time_s for s in stages)
    assert slow.busy_ratio == max(s.busy_ratio for s in stages)
    rec = observe(throttled, interval_s=1.0, seed=0)
    clocks = {g: np.median(s.values[Metric.SM_CLOCK_MHZ]) for g, s in rec.series.items()}
    assert clocks[2] < 0.7 * clocks[0]
    bits = rec.series[2].values[Metric.CLOCKS_EVENT_REASONS].astype(int)
    assert np.all(bits & CLOCKS_EVENT_SW_POWER_CAP)
    assert not np.any(rec.series[0].values[Metric.CLOCKS_EVENT_REASONS].astype(int) & 0x4)
    assert np.max(rec.series[2].values[Metric.POWER_AVG_W]) <= 250 * 1.03


def test_imbalanced_heavy_stage_is_busiest() -> None:
    res = simulate(load_scenario("pp4-imbalanced"), duration_s=10.0, seed=0)
    busy = [s.busy_ratio for s in res.truth.stages]
    assert int(np.argmax(busy)) == 3
    assert busy[3] > 1.4 * max(busy[:3])


def test_graphs_off_is_launch_bound() -> None:
    on = simulate(load_scenario("pp8-async"), duration_s=10.0, seed=0)
    off = simulate(load_scenario("pp8-graphs-off"), duration_s=10.0, seed=0)
    assert off.tokens_per_s < 0.7 * on.tokens_per_s
    for s_on, s_off in zip(on.truth.stages, off.truth.stages, strict=True):
        assert s_off.mean_stage_time_s > 1.5 * s_on.mean_stage_time_s
        # kernels resident most of the time, yet the stage computes (busy) less than half
        # of the time it holds a micro-batch: launch gaps are not busy (SM activity sees
        # them idle, and so does the truth)
        holding = s_off.micro_batches * s_off.mean_stage_time_s / 10.0
        assert s_off.kernel_busy_ratio > 0.85
        assert s_off.busy_ratio < 0.5 * holding
        assert s_off.sm_active_ratio / holding < 0.5
        assert s_on.sm_active_ratio / s_on.busy_ratio > 0.7


def test_the_per_slot_cap_fills_the_pipeline(serialized: SimResult) -> None:
    fixed = simulate(load_scenario("pp8-async"), duration_s=10.0, seed=0)
    assert fixed.truth.replicas[0].mean_in_flight > 6
    assert fixed.truth.replicas[0].busy_sum > 3 * serialized.truth.replicas[0].busy_sum
    assert fixed.tokens_per_s > 3 * serialized.tokens_per_s


def test_async_depth_alone_leaves_requests_that_arrive_together_in_one_slot() -> None:
    """SGLang admits waiting requests into the slot whose turn it is, up to the cap:
    eight requests that arrive together share one micro-batch, whatever the depth."""
    deep = apply_overrides(load_scenario("pp8-serialized"), {"parallel.pp_async_batch_depth": 8})
    rep = simulate(deep, duration_s=10.0, seed=0).truth.replicas[0]
    assert rep.max_in_flight == 1 and rep.decode_tokens_per_micro_batch == 8.0
    # Spread out (one every 0.2 s) most still join the loaded slot: the scheduler spends
    # its time waiting for that slot's result, and takes them at that slot's turn.
    spread = apply_overrides(deep, {"workload.ramp_s": 1.6})
    rep = simulate(spread, duration_s=10.0, seed=0).truth.replicas[0]
    assert rep.max_in_flight < 4
    # The per-slot cap is what spreads them: one request per slot.
    capped = apply_overrides(spread, {"parallel.pp_max_micro_batch_size": 1})
    assert simulate(capped, duration_s=10.0, seed=0).truth.replicas[0].max_in_flight == 8


def test_chunked_prefill_spreads_a_long_prompt_over_slots() -> None:
    """The chunked request's next chunk is taken at the next slot's turn."""
    sc = apply_overrides(
        load_scenario("pp8-serialized"),
        {
            "workload.concurrency": 1,
            "workload.input_tokens": 32768,
            "workload.length_jitter_ratio": 0.0,
            "workload.chunk_size": 4096,
        },
    )
    rep = simulate(sc, duration_s=3.0, seed=0).truth.replicas[0]
    assert rep.max_in_flight == 8  # eight chunks in flight at once


def test_vllm_keeps_at_most_pp_size_batches_in_flight() -> None:
    sc = apply_overrides(
        load_scenario("pp8-serialized"),
        {
            "engine": "vllm",
            "engine_argv": ["vllm", "serve", "m", "-pp", "8", "--enforce-eager"],
            "parallel.pp_async_batch_depth": 0,
            "workload.concurrency": 16,
            "workload.ramp_s": 2.0,
        },
    )
    old = apply_overrides(sc, {"engine_version": "0.12.0"})
    rep = simulate(old, duration_s=10.0, seed=0).truth.replicas[0]
    assert 2 <= rep.max_in_flight <= 8
    together = simulate(apply_overrides(old, {"workload.ramp_s": 0.0}), 10.0, seed=0)
    assert together.truth.replicas[0].max_in_flight == 1  # one batch takes every request


@pytest.mark.parametrize(
    ("version", "extra", "v2", "queue"),
    [
        ("0.12.0", [], None, 8),  # the executor's queue: pp_size
        ("0.19.1", [], None, 8),  # async on by default, still pp_size with PP
        ("0.23.0", [], None, 8),  # V2 runner only for some architectures: not assumed
        ("0.23.0", [], True, 9),  # VLLM_USE_V2_MODEL_RUNNER=1: pp_size + 1
        ("0.33.0", [], None, 9),  # async + V2 by default
        ("0.33.0", ["--no-async-scheduling"], None, 8),
        ("0.33.0", [], False, 8),  # V1 runner: async off with PP
    ],
)
def test_vllm_queue_follows_the_release(
    version: str, extra: list[str], v2: bool | None, queue: int
) -> None:
    """Issue 18: vLLM 0.23+ with async scheduling and the V2 runner keeps pp_size + 1."""
    sc = apply_overrides(
        load_scenario("pp8-serialized"),
        {
            "engine": "vllm",
            "engine_argv": ["vllm", "serve", "m", "-pp", "8", *extra],
            "engine_version": version,
            "parallel.pp_async_batch_depth": 0,
            "parallel.v2_model_runner": v2,
            "workload.concurrency": 256,
            "workload.ramp_s": 5.0,
        },
    )
    assert sc.parallel.vllm_in_flight(version, sc.engine_argv).batches == queue
    rep = simulate(sc, duration_s=15.0, seed=0).truth.replicas[0]
    assert rep.max_in_flight == queue


def test_vllm_012_refuses_async_scheduling_with_pp() -> None:
    with pytest.raises(ScenarioError, match="refuse to start"):
        apply_overrides(
            load_scenario("pp8-serialized"),
            {
                "engine": "vllm",
                "engine_argv": ["vllm", "serve", "m", "-pp", "8", "--async-scheduling"],
                "engine_version": "0.12.0",
                "parallel.pp_async_batch_depth": 0,
            },
        )


def test_single_request_cannot_fill_a_pipeline() -> None:
    res = simulate(load_scenario("pp8-single-request"), duration_s=10.0, seed=0)
    rep = res.truth.replicas[0]
    assert rep.max_in_flight == 1 and rep.mean_in_flight <= 1.0
    assert rep.busy_sum <= 1.0


def test_idle_engine_is_idle() -> None:
    res = simulate(load_scenario("idle"), duration_s=5.0, seed=0)
    assert res.tokens_per_s == 0
    rec = observe(res, interval_s=1.0, seed=0, noise_ratio=0.0)
    for s in rec.series.values():
        assert np.allclose(s.values[Metric.POWER_AVG_W], 85.0)
        assert np.all(s.values[Metric.CLOCKS_EVENT_REASONS].astype(int) & CLOCKS_EVENT_GPU_IDLE)
        assert np.all(s.values[Metric.SM_CLOCK_MHZ] == 210)
    assert np.all(rec.load.running == 0) and np.all(rec.load.queued == 0)


def test_tp8_gpus_move_in_phase() -> None:
    res = simulate(load_scenario("tp8"), duration_s=5.0, seed=0)
    sm = res.timeline.field("sm_active")
    assert np.array_equal(sm[0], sm[7])
    assert res.topology is not None and res.topology.tp_size == 8 and res.topology.pp_size == 1


def test_dp8_replicas_are_independent() -> None:
    res = simulate(load_scenario("dp8"), duration_s=5.0, seed=0)
    assert res.topology is None and len(res.topologies) == 8
    assert [t.gpus for t in res.topologies] == [(g,) for g in range(8)]
    busy = res.timeline.field("kernel_busy")
    assert not np.array_equal(busy[0], busy[1])  # own request lengths, own rhythm
    assert len(res.truth.replicas) == 8


def test_load_schedule_changes_concurrency() -> None:
    sc = apply_overrides(
        load_scenario("pp8-async"),
        {
            "workload.schedule": [
                {"start_s": 0, "concurrency": 8},
                {"start_s": 5, "concurrency": 0},
            ],
            "workload.output_tokens": 16,
        },
    )
    res = simulate(sc, duration_s=10.0, seed=0)
    rec = observe(res, interval_s=1.0, seed=0)
    # Finished requests come back after the client's round trip (client_delay_s).
    at = np.searchsorted(res.load.t_s, [2.0, 10.0], side="right") - 1
    assert 6 <= res.load.running[at[0]] <= 8
    assert res.load.running[at[1]] == 0
    assert rec.load.running[-1] == 0  # SGLang's gauge too: an idle turn logs 0
    late = res.timeline.field("power_w")[:, -200:]
    assert float(late.mean()) == pytest.approx(85.0, abs=1.0)


def test_pcie_traffic_between_stages(serialized: SimResult) -> None:
    tx = serialized.timeline.field("pcie_tx_bytes_per_s").astype(float)
    rx = serialized.timeline.field("pcie_rx_bytes_per_s").astype(float)
    assert tx[:7].sum() > 0 and tx[7].sum() == 0  # the last stage sends no activations
    assert rx[0].sum() == 0 and rx[1:].sum() > 0
    # What stage s sends, stage s+1 receives.
    assert tx[2].sum() == pytest.approx(rx[3].sum(), rel=1e-6)


@pytest.mark.parametrize(
    ("version", "value", "flag"),
    [
        ("0.33.0", False, "--no-async-scheduling"),
        ("0.33.0", True, "--async-scheduling"),
        ("0.33.0", None, None),
        ("0.9.2", False, None),  # 0.9.2 has no async-scheduling flag: never rendered
    ],
)
def test_vllm_async_override_rewrites_the_command_line(
    version: str, value: bool | None, flag: str | None
) -> None:
    sc = apply_overrides(
        load_scenario("pp8-serialized"),
        {
            "engine": "vllm",
            "engine_argv": ["vllm", "serve", "m", "-pp", "8", "--async-scheduling"],
            "engine_version": version,
            "parallel.pp_async_batch_depth": 0,
            "parallel.overlap_schedule": value,
        },
    )
    present = [a for a in sc.engine_argv if "async-scheduling" in a]
    assert present == ([] if flag is None else [flag])
