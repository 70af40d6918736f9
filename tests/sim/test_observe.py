"""The observation model reports what NVML would, computed from the Timeline."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from bubblewatch.model.metrics import Metric
from bubblewatch.sim import SimResult, Timeline, load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides


def _hand_mean(cells: np.ndarray, dt: float, a: float, b: float) -> float:
    """Mean of a piecewise-constant signal over [a, b], cell by cell (the slow obvious way)."""
    total = 0.0
    for i, v in enumerate(cells):
        lo, hi = i * dt, (i + 1) * dt
        overlap = min(hi, b) - max(lo, a)
        if overlap > 0:
            total += float(v) * overlap
    return total / (b - a)


def test_power_avg_is_trailing_one_second_mean(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=1.0, seed=3, noise_ratio=0.0, start_epoch_s=0.0)
    tl = serialized.timeline
    for g in (0, 5):
        s = rec.series[g]
        for i in (2, 10, 20):
            t = float(s.t_s[i])
            want = _hand_mean(tl.field("power_w")[g], tl.dt_s, t - 1.0, t)
            assert s.values[Metric.POWER_AVG_W][i] == pytest.approx(want, rel=1e-9)
            inst = _hand_mean(tl.field("power_w")[g], tl.dt_s, t - 0.025, t)
            assert s.values[Metric.POWER_INSTANT_W][i] == pytest.approx(inst, rel=1e-9)


def _on_gpu(res: SimResult, name: str) -> SimResult:
    """The same run, its GPUs named `name` (what NVML's power reading averages follows it)."""
    hw = res.scenario.hardware
    gpu = replace(hw.gpu, name=name)
    return replace(res, scenario=replace(res.scenario, hardware=replace(hw, gpu=gpu)))


@pytest.mark.parametrize(
    ("name", "window_s"),
    [
        ("NVIDIA A100-SXM4-80GB", 0.025),  # GA100: nvmlDeviceGetPowerUsage is instant
        ("Tesla V100-SXM2-32GB", 0.025),  # Volta, older than GA100: instant
        ("NVIDIA H100 80GB HBM3", 1.0),  # Hopper: the mean over the last 1 s
        ("NVIDIA A10", 1.0),  # Ampere but not GA100: 1 s
        ("Some Future GPU", 1.0),  # not known: a 1 s mean, as before
    ],
)
def test_power_avg_window_follows_the_gpu_model(
    serialized: SimResult, name: str, window_s: float
) -> None:
    res = _on_gpu(serialized, name)
    assert res.scenario.hardware.gpu.power_usage_window_s == window_s
    rec = observe(res, interval_s=1.0, seed=3, noise_ratio=0.0, start_epoch_s=0.0)
    cells = res.timeline.field("power_w")[2]
    s = rec.series[2]
    for i in (5, 12, 25):
        t = float(s.t_s[i])
        want = _hand_mean(cells, res.timeline.dt_s, t - window_s, t)
        assert s.values[Metric.POWER_AVG_W][i] == pytest.approx(want, rel=1e-9)
    one_s = [_hand_mean(cells, res.timeline.dt_s, t - 1.0, t) for t in s.t_s[5:]]
    # The two readings differ on this pipeline (a stage computes ~1/8 of the time).
    differs = np.abs(s.values[Metric.POWER_AVG_W][5:] - one_s) > 1.0
    assert differs.any() == (window_s < 1.0)


def test_energy_counter_integrates_power(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=1.0, seed=0, noise_ratio=0.0)
    s = rec.series[3]
    e = s.values[Metric.ENERGY_J]
    assert np.all(np.diff(e) > 0)
    # Between consecutive 1 s polls, energy grows by the 1 s average power times 1 s.
    assert np.diff(e) == pytest.approx(s.values[Metric.POWER_AVG_W][1:] * 1.0, abs=0.01)
    assert e[0] > 1e5  # an arbitrary starting counter, not zero


def test_gpm_is_absent_below_100ms_and_present_above(serialized: SimResult) -> None:
    fast = observe(serialized, interval_s=0.05, seed=0)
    for s in fast.series.values():
        assert not s.has(Metric.SM_ACTIVE_RATIO)
        assert s.has(Metric.POWER_AVG_W) and s.has(Metric.KERNEL_BUSY_RATIO)
    ok = observe(serialized, interval_s=0.1, seed=0)
    sm = ok.series[0].values[Metric.SM_ACTIVE_RATIO]
    assert math.isnan(sm[0])  # no previous GPM sample at the first poll
    assert np.isfinite(sm[1:]).all()


def test_gpm_is_mean_since_previous_poll(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=0.5, seed=0, noise_ratio=0.0, start_epoch_s=0.0)
    tl = serialized.timeline
    s = rec.series[4]
    t = s.t_s
    for i in (1, 7, 30):
        want = _hand_mean(tl.field("sm_active")[4], tl.dt_s, float(t[i - 1]), float(t[i]))
        assert s.values[Metric.SM_ACTIVE_RATIO][i] == pytest.approx(want, rel=1e-9)


RAMP_S = 2.0


def _ramp_result(base: SimResult) -> SimResult:
    """The same run with a hand-made timeline: kernel_busy rises linearly 0..1 over 2 s."""
    tl = base.timeline
    n = round(RAMP_S / tl.dt_s)
    data = np.zeros((tl.n_gpus, tl.data.shape[1], n), dtype=np.float32)
    data[:, 4, :] = (np.arange(n) + 0.5) / n
    data[:, 0, :] = 100.0
    return replace(base, timeline=Timeline(data, tl.dt_s, tl.gpus), duration_s=RAMP_S)


def test_utilization_is_last_completed_period_in_whole_percent(serialized: SimResult) -> None:
    res = _ramp_result(serialized)
    period = res.scenario.hardware.gpu.utilization_period_s
    rec = observe(res, interval_s=0.25, seed=0, noise_ratio=0.0, start_epoch_s=0.0)
    tol = 0.005 * RAMP_S + 1e-6  # whole-percent rounding, in seconds of ramp
    ends = []
    for s in rec.series.values():
        t = s.t_s
        u = s.values[Metric.KERNEL_BUSY_RATIO]
        ok = np.isfinite(u)
        assert ok[2:].all()
        assert np.allclose(u[ok] * 100, np.round(u[ok] * 100))
        # On a ramp the mean over a period is the ramp at its midpoint: recover the period end.
        end = u[ok] * RAMP_S + period / 2
        assert np.all(end <= t[ok] + tol)  # the period completed before the poll
        assert np.all(end > t[ok] - period - tol)  # and it is the last one that did
        steps = (end - end[0]) / period
        assert np.allclose(steps, np.round(steps), atol=2 * tol / period)  # fixed driver grid
        ends.append(end[-1])
    # Each GPU's driver has its own period phase.
    assert max(ends) - min(ends) > 2 * tol


def test_gpus_are_polled_at_different_instants(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=1.0, seed=0)
    first = [float(s.t_s[0]) for s in rec.series.values()]
    assert len(set(first)) == len(first)
    assert max(first) - min(first) < 0.05


def test_dropped_samples_and_jitter(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=0.2, seed=1, drop_ratio=0.2, jitter_s=0.01)
    counts = [len(s) for s in rec.series.values()]
    full = len(observe(serialized, interval_s=0.2, seed=1).series[0])
    assert all(c < full for c in counts)
    assert sum(counts) == pytest.approx(0.8 * full * len(counts), rel=0.1)
    for s in rec.series.values():
        assert np.all(np.diff(s.t_s) > 0)


def _true_running(res: SimResult, interval_s: float = 1.0) -> np.ndarray:
    ts = np.arange(1, int(res.duration_s / interval_s) + 1) * interval_s
    return res.load.running[np.searchsorted(res.load.t_s, ts, side="right") - 1]


def test_load_series_reports_running_and_queued(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=1.0, seed=0)
    assert len(rec.load) == 30
    assert np.all(_true_running(serialized) == 8) and np.all(rec.load.queued == 0)
    # Past max_running_requests the rest wait in the queue.
    over = simulate(
        apply_overrides(
            load_scenario("pp8-serialized"),
            {"parallel.max_running_requests": 8, "workload.concurrency": 12},
        ),
        duration_s=3.0,
    )
    rec2 = observe(over, interval_s=1.0)
    assert np.all(_true_running(over) == 8) and np.all(rec2.load.queued == 4)
    # The per-slot cap (max_running // pp_size = 8 here) splits 12 arrivals 8 + 4.
    split = simulate(
        apply_overrides(
            load_scenario("pp8-serialized"),
            {"parallel.max_running_requests": 64, "workload.concurrency": 12},
        ),
        duration_s=3.0,
    )
    assert np.all(_true_running(split) == 12)
    assert split.truth.replicas[0].max_in_flight == 2


def test_sglang_pp_gauge_counts_the_micro_batch_it_last_logged(serialized: SimResult) -> None:
    """SGLang with PP exports one micro-batch's requests, as scheduler_metrics_mixin does.

    The eight requests arrive together: their prefill logs the slot's running batch
    before they join (0), the 40th decode result the micro-batch of all eight.
    """
    rec = observe(serialized, interval_s=1.0, seed=0)
    mb = rec.load.micro_batch
    assert mb is not None
    np.testing.assert_array_equal(rec.load.running, mb)  # what the endpoint shows
    first = int(np.argmax(mb > 0))
    assert first >= 1 and np.all(mb[:first] == 0) and np.all(mb[first:] == 8)
    # Five requests under a per-slot cap of 1: five micro-batches of one, and the
    # gauge shows one of them while five run.
    spread = simulate(
        apply_overrides(
            load_scenario("pp8-serialized"),
            {"workload.concurrency": 5, "parallel.pp_max_micro_batch_size": 1},
        ),
        duration_s=20.0,
    )
    gauge = observe(spread, interval_s=1.0).load.micro_batch
    assert gauge is not None and set(np.unique(gauge[5:])) == {1.0}
    assert np.all(_true_running(spread)[5:] == 5)


def test_gauge_counts_all_requests_without_a_pipeline() -> None:
    """One stage (TP8) or vLLM: the gauge is all running requests, no micro_batch."""
    vllm = apply_overrides(
        load_scenario("pp8-serialized"),
        {"engine": "vllm", "engine_argv": ["vllm", "serve", "m", "-pp", "8"]},
    )
    for sc in (load_scenario("tp8"), vllm):
        res = simulate(sc, duration_s=5.0)
        load = observe(res, interval_s=1.0).load
        assert load.micro_batch is None
        np.testing.assert_array_equal(load.running, _true_running(res))


def test_recording_carries_identity_and_truth(serialized: SimResult) -> None:
    rec = observe(serialized, interval_s=1.0, seed=0)
    assert rec.topology is not None and rec.topology.pp_size == 8
    assert "--disable-cuda-graph" in rec.topology.argv
    assert rec.meta["scenario"] == "pp8-serialized"
    assert rec.meta["tokens_per_s"] == pytest.approx(serialized.tokens_per_s, rel=1e-3)
    assert len(rec.meta["truth"]["stages"]) == 8
    assert [g.uuid for g in rec.gpus] == [g.uuid for g in serialized.timeline.gpus]
    assert Metric.SM_ACTIVE_RATIO in rec.metrics()


def test_bad_interval_is_rejected(serialized: SimResult) -> None:
    from bubblewatch.sim import ScenarioError

    with pytest.raises(ScenarioError, match="interval"):
        observe(serialized, interval_s=0.0)
    with pytest.raises(ScenarioError, match="no sample"):
        observe(serialized, interval_s=100.0)
