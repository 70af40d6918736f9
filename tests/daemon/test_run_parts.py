"""The daemon's parts without a process: ring buffer, simulated source, deadlines, discovery."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bubblewatch.daemon.loop.ticks import Every, Heartbeat
from bubblewatch.daemon.pipelines.discovery import Lookup, engine_changes, sim_pipelines
from bubblewatch.daemon.ring import RingBuffer, capacity_for
from bubblewatch.daemon.sources.simsource import SimSource
from bubblewatch.detect import Verdict, diagnose
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import LoadSample, Sample

P = Metric.POWER_AVG_W
S = Metric.SM_ACTIVE_RATIO


def test_ring_keeps_only_the_newest_capacity_samples() -> None:
    ring = RingBuffer(5)
    for i in range(12):
        ring.add([Sample(float(i), 0, {P: 100.0 + i})])
    rec = ring.recording(-math.inf, math.inf)
    s = rec.series[0]
    assert s.t_s.tolist() == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert s.values[P].tolist() == [107.0, 108.0, 109.0, 110.0, 111.0]
    assert ring.stats().samples == 5
    # A window copies: later writes do not change what the analysis holds.
    ring.add([Sample(12.0, 0, {P: 999.0})])
    assert s.values[P][-1] == 111.0


def test_ring_keeps_a_per_micro_batch_gauge_as_such() -> None:
    """A reading that counts one micro-batch (SGLang with PP) reaches the window as one."""
    ring = RingBuffer(8)
    ring.add([Sample(float(i), 0, {P: 1.0}) for i in range(4)])
    ring.add_load(LoadSample(0.0, 8.0, 0.0))
    ring.add_load(LoadSample(1.0, 1.0, 0.0, 1.0))
    ring.add_load(LoadSample(2.0, 2.0, None, 2.0))
    assert ring.last_load() == LoadSample(2.0, 2.0, None, 2.0)
    load = ring.recording(0.0, 10.0).load
    assert load.micro_batch is not None
    np.testing.assert_array_equal(load.micro_batch, [np.nan, 1.0, 2.0])
    assert ring.recording(0.0, 0.5).load.micro_batch is None  # none in this window


def test_ring_memory_is_flat_once_full() -> None:
    ring = RingBuffer(capacity_for(10.0, 0.5))
    sizes = []
    for i in range(200):
        ring.add([Sample(i * 0.5, g, {P: 1.0, S: 0.5}) for g in range(4)])
        ring.add_load(LoadSample(i * 0.5, 8.0, None))
        sizes.append(ring.stats().nbytes)
    assert ring.capacity == 25
    assert len(set(sizes)) == 1  # preallocated: no growth with uptime


def test_ring_metric_absent_until_reported_then_nan_where_missing() -> None:
    ring = RingBuffer(8)
    ring.add([Sample(0.0, 0, {P: 1.0})])
    ring.add([Sample(1.0, 0, {P: 2.0, S: 0.3})])
    ring.add([Sample(2.0, 0, {P: 3.0})])
    ring.add([Sample(2.0, 1, {P: 3.0})])
    rec = ring.recording(0.0, 10.0)
    assert np.isnan(rec.series[0].values[S][[0, 2]]).all()
    assert rec.series[0].values[S][1] == pytest.approx(0.3)
    assert S not in rec.series[1].values  # never reported: absent, not zero
    assert rec.load.t_s.size == 0


def test_ring_window_sorts_late_buffered_samples_and_resize_keeps_newest() -> None:
    ring = RingBuffer(10)
    for t in (1.0, 2.0, 3.0, 2.5, 4.0):  # 2.5 arrives late (driver sample buffer)
        ring.add([Sample(t, 0, {P: t})])
    rec = ring.recording(2.0, 4.0)
    assert rec.series[0].t_s.tolist() == [2.0, 2.5, 3.0]
    ring.resize(3)  # keeps the last three written: 3.0, 2.5, 4.0 (read back in time order)
    assert ring.recording(0.0, 10.0).series[0].values[P].tolist() == [2.5, 3.0, 4.0]
    assert ring.last(1.0).series[0].t_s.tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match="capacity"):
        RingBuffer(1)


def test_every_skips_missed_deadlines_without_drift() -> None:
    e = Every(1.0, first_s=10.0)
    assert not e.due(9.99)
    assert e.due(10.0) and e.next_s == 11.0
    assert e.due(13.7) and e.next_s == 14.0  # two missed ticks are skipped, grid kept
    e.now(14.5)
    assert e.due(14.5)


@pytest.fixture(scope="module")
def serialized() -> SimSource:
    return SimSource("pp8-serialized", loop_s=20.0, wall_clock=lambda: 1e9)


def test_sim_source_readings_follow_nvml_rules(serialized: SimSource) -> None:
    src = serialized
    first = src.poll(100.0)
    assert len(first) == 8 and {s.gpu for s in first} == set(range(8))
    assert S not in first[0].values  # GPM needs a previous sample
    too_soon = src.poll(100.05)
    assert S not in too_soon[0].values  # < 100 ms apart: no GPM reading
    later = src.poll(100.3)
    assert 0.0 <= later[0].values[S] <= 1.0
    assert later[0].values[Metric.KERNEL_BUSY_RATIO] * 100 == pytest.approx(
        round(later[0].values[Metric.KERNEL_BUSY_RATIO] * 100)
    )
    assert 50 < later[0].values[P] < 600


def _power_readings(src: SimSource, n: int = 40) -> np.ndarray:
    """(poll, GPU, [power_avg_w, power_instant_w]) over `n` polls 0.25 s apart."""
    rows = [src.poll(100.0 + i * 0.25) for i in range(n)]
    return np.array([[(s.values[P], s.values[Metric.POWER_INSTANT_W]) for s in r] for r in rows])


def test_sim_source_power_usage_is_instant_on_an_a100() -> None:
    # NVML: nvmlDeviceGetPowerUsage is instant on GA100 and older, a 1 s mean from Ampere on.
    a100 = SimSource("layersplit4", loop_s=60.0, warmup_s=62.0, wall_clock=lambda: 1e9)
    got = _power_readings(a100)
    assert np.ptp(got[..., 1]) > 100.0  # past the loading: GPUs taking turns
    # The same reading as the instant one but for the two draws of noise (0.5% each).
    np.testing.assert_allclose(got[..., 0], got[..., 1], rtol=0.03)
    # On the RTX PRO 6000 (Blackwell) the reading is the 1 s mean: far smoother.
    blackwell = _power_readings(SimSource("pp8-serialized", loop_s=20.0, wall_clock=lambda: 1e9))
    assert np.ptp(blackwell[..., 0]) < 0.25 * np.ptp(blackwell[..., 1])


def test_sim_source_energy_rises_across_loop_wraps(serialized: SimSource) -> None:
    src = serialized
    energy, power = [], []
    for i in range(120):  # 60 s of polls: three 20 s loops
        rows = src.poll(200.0 + i * 0.5)
        energy.append(rows[3].values[Metric.ENERGY_J])
        power.append(rows[3].values[P])
    e = np.array(energy)
    assert (np.diff(e) > 0).all()
    # The counter's slope matches the average power reported (within noise).
    assert (e[-1] - e[0]) / 59.5 == pytest.approx(np.mean(power), rel=0.05)


def test_sim_source_switch_changes_verdict_and_emits_event() -> None:
    wall = [1e9]
    src = SimSource("pp8-serialized", loop_s=20.0, wall_clock=lambda: wall[0])

    def play(t0: float, n: int) -> RingBuffer:
        ring = RingBuffer(200)
        for i in range(n):
            now = t0 + i * 0.25
            wall[0] = 1e9 + now
            ring.add(src.poll(now))
            ring.add_load(src.load(now))
        return ring

    ring = play(0.0, 60)
    topo = src.topologies()[0]
    assert diagnose(ring.last(12.0), topo).verdict is Verdict.SERIALIZED
    e_before = src.poll(15.0)[0].values[Metric.ENERGY_J]
    src.switch("pp8-async")
    assert src._switcher is not None
    src._switcher.join(30)
    ring = play(15.25, 60)
    events = src.events()
    assert [e.kind for e in events] == ["scenario_change"]
    assert events[0].detail == {"from": "pp8-serialized", "to": "pp8-async"}
    assert diagnose(ring.last(12.0), src.topologies()[0]).verdict is Verdict.HEALTHY
    assert ring.recording(0, math.inf).series[0].values[Metric.ENERGY_J][0] > e_before


def test_engine_change_is_noticed_from_parsed_settings_only() -> None:
    a = SimSource("pp8-serialized", loop_s=10.0)
    b = SimSource("pp8-async", loop_s=10.0)
    old = sim_pipelines(a.topologies(), a.playback.engine_argv, instance="h")
    new = sim_pipelines(b.topologies(), b.playback.engine_argv, instance="h")
    assert [p.id for p in old.pipelines] == ["h/sglang:30000"]
    diff = engine_changes(old, new)
    assert diff["h/sglang:30000"]["pp_async_batch_depth"] == (0, 8)
    assert diff["h/sglang:30000"]["cuda_graph"] == (False, True)
    assert engine_changes(old, old) == {}
    assert engine_changes(None, new) == {}
    assert engine_changes(Lookup((), "none"), new) == {}


def test_watchdog_pings_stop_while_the_main_loop_is_stalled() -> None:
    """Regression: a main loop wedged (an alias-bomb scenario on SIGHUP) kept the watchdog fed."""
    now = [0.0]
    beat = Heartbeat(clock=lambda: now[0])
    pings: list[float] = []
    gated = beat.gate(lambda: pings.append(now[0]), max_age_s=15.0)
    for t in (1.0, 10.0, 15.0):
        now[0] = t
        gated()
    now[0] = 16.0
    assert gated() is False  # 16 s since the last beat: systemd will restart us
    beat.beat()
    now[0] = 17.0
    gated()
    assert pings == [1.0, 10.0, 15.0, 17.0]
