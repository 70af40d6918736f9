"""The ring buffer with the driver's buffered rows: history as configured, memory bounded.

Regression: the ring was sized one row per poll, but the NVML sampler also
emits the driver's buffered power and utilisation samples as rows (on the
fake NVML: every 100 ms and every 1/6 s), so with 200 ms polls and
`history: 30s` the 188-row ring held 9.8 s, under the detector's 10 s
minimum, and the live daemon said `insufficient_data` forever. Buffered rows
(`Sample.origin == "buffer"`) now go to a second ring per GPU.
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from fake_nvml.fixtures import fake_nvml, fake_nvml_lib
from fake_nvml.timeline import serialized_pipeline

from bubblewatch.daemon.ring import (
    BUFFER_MAX_RATE_HZ,
    RingBuffer,
    buffer_capacity_for,
    capacity_for,
)
from bubblewatch.detect import Verdict, diagnose
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Sample, SampleOrigin
from bubblewatch.model.topology import Topology
from bubblewatch.sources.nvml import NvmlSource, SamplerConfig

__all__ = ["fake_nvml", "fake_nvml_lib"]  # fixtures

HISTORY_S, INTERVAL_S, WINDOW_S = 30.0, 0.2, 10.5
P, BUSY = Metric.POWER_INSTANT_W, Metric.KERNEL_BUSY_RATIO


def daemon_ring() -> RingBuffer:
    """The ring as `bubblewatch run` sizes it for the test daemons' config."""
    return RingBuffer(
        capacity_for(HISTORY_S, INTERVAL_S), buffer_capacity=buffer_capacity_for(WINDOW_S)
    )


def fake_driver_rows(
    seconds: float, gpus: int = 2, *, origin: SampleOrigin = "buffer"
) -> list[Sample]:
    """What the NVML sampler emits on the fake: a poll every 200 ms, then the driver's
    power samples (every 100 ms) and utilisation samples (every 1/6 s) since the last poll,
    one row per distinct timestamp (as `GpuReader.drain_buffers` builds them)."""
    rows: list[Sample] = []
    for k in range(1, round(seconds / INTERVAL_S) + 1):  # poll k at k/5 s
        now = k * INTERVAL_S
        for g in range(gpus):
            buffered: dict[float, dict[Metric, float]] = {}
            # Power sample j at j/10 s, utilisation sample j at j/6 s, new since poll k-1.
            for per_s, metric, value in ((10, P, 150.0 + g), (6, BUSY, 1.0)):
                for j in range((k - 1) * per_s // 5 + 1, k * per_s // 5 + 1):
                    buffered.setdefault(round(j / per_s, 6), {})[metric] = value
            rows += [Sample(t, g, v, origin) for t, v in sorted(buffered.items())]
            rows.append(Sample(now, g, {P: 150.0 + g, BUSY: 1.0, Metric.SM_CLOCK_MHZ: 1980.0}))
    return rows


def span_s(ring: RingBuffer, gpu: int = 0) -> float:
    t = ring.recording(-math.inf, math.inf).series[gpu].t_s
    return float(t[-1] - t[0])


def test_buffered_rows_no_longer_crowd_the_history_out_of_the_ring() -> None:
    rows = fake_driver_rows(40.0)
    # The bug: unmarked, the 14 buffered rows a second share the 188-row poll ring
    # with the 5 polls a second, and the ring holds under 10 s of a 30 s history.
    old = RingBuffer(capacity_for(HISTORY_S, INTERVAL_S))
    old.add([r._replace(origin="poll") for r in rows])
    assert old.capacity == 188
    assert span_s(old) < 10.0
    # Fixed: polls keep the configured history; buffered rows cover the analysis window.
    ring = daemon_ring()
    assert ring.add(rows) == len(rows)
    assert span_s(ring) >= HISTORY_S
    window = ring.last(WINDOW_S).series[0]
    t, busy, clock = window.t_s, window.values[BUSY], window.values[Metric.SM_CLOCK_MHZ]
    buffered_t = t[np.isnan(clock)]  # buffered rows carry no SM clock
    assert buffered_t[-1] - buffered_t[0] >= WINDOW_S - 0.2
    assert len(buffered_t) == pytest.approx(14 * WINDOW_S, rel=0.05)
    assert np.all(np.diff(t) >= 0)  # both rings merged in time order
    # Power samples every 100 ms, utilisation samples every 1/6 s, each in its own column.
    assert np.count_nonzero(np.isfinite(busy[np.isnan(clock)])) == pytest.approx(
        6 * WINDOW_S, rel=0.05
    )
    buffered_power = window.values[P][np.isnan(clock)]
    assert np.count_nonzero(np.isfinite(buffered_power)) == pytest.approx(10 * WINDOW_S, rel=0.05)
    assert ring.stats().buffer_merged == 0  # 14 rows/s is under the cap


def test_live_sampler_on_fake_nvml_holds_the_configured_history(fake_nvml: Any) -> None:
    """The real sampler (through pynvml) into the daemon's ring: enough for a diagnosis."""
    fake = fake_nvml(serialized_pipeline(4))
    ring = daemon_ring()
    with NvmlSource.open(SamplerConfig(interval_s=INTERVAL_S), wall_clock=fake.wall) as src:
        for k in range(1, 201):  # 40 s of polls
            rows = src.poll(fake.at(0.0012 + k * INTERVAL_S))
            ring.add(rows)
    assert any(r.origin == "buffer" for r in rows)
    stats = ring.stats()
    assert stats.buffer_samples > 0 and stats.samples == 4 * ring.capacity
    assert span_s(ring) >= HISTORY_S
    window = ring.last(WINDOW_S, topology=Topology.from_sizes(4, 1))
    assert min(float(s.t_s[-1] - s.t_s[0]) for s in window.series.values()) >= 10.0
    diag = diagnose(window, window.topology)
    assert diag.verdict is not Verdict.INSUFFICIENT_DATA, diag.findings


def test_ring_memory_is_bounded_and_flat_at_any_driver_rate() -> None:
    """A driver buffering at 200 Hz (4x the cap) for 5 minutes: bytes stop growing once
    both rings are full, and the buffer ring still spans the analysis window."""
    ring = daemon_ring()
    gap = 1.0 / BUFFER_MAX_RATE_HZ
    sizes = []
    traced = []
    tracemalloc.start()
    for second in range(300):
        t0 = float(second)
        buffered = [
            Sample(t0 + i / 200.0, g, {P: 100.0 + i, BUSY: 0.5}, "buffer")
            for i in range(200)
            for g in range(2)
        ]
        polls = [Sample(t0 + i * INTERVAL_S, g, {P: 1.0, Metric.ENERGY_J: t0}) for i in range(5)
                 for g in range(2)]  # fmt: skip
        ring.add(sorted(buffered + polls, key=lambda s: (s.gpu, s.t_s)))
        if second % 30 == 29:
            sizes.append(ring.stats().nbytes)
            traced.append(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    stats = ring.stats()
    assert sizes == [sizes[0]] * len(sizes)
    # Two GPUs; poll ring: t and energy (float64) + power (float32); buffer ring: t + the
    # 2 metrics buffered rows carry (float32); the load ring: t only.
    poll, buffer = (8 + 8 + 4) * ring.capacity, (8 + 4 + 4) * ring.buffer_capacity
    assert sizes[0] == 2 * (poll + buffer) + 8 * ring.capacity
    # What Python and numpy really hold stops growing once the rings are full (~40 s):
    # unbounded, the kept rows alone would add 2.4 KB/s (576 KB from 60 s to 300 s).
    assert max(traced[2:]) - traced[1] < 64 * 1024, traced
    assert stats.buffer_samples == 2 * ring.buffer_capacity
    assert stats.buffer_merged > 0
    t = ring.last(WINDOW_S).series[1].t_s
    buffered_t = t[np.isnan(ring.last(WINDOW_S).series[1].values[Metric.ENERGY_J])]
    assert np.diff(buffered_t).min() >= gap - 1e-9  # thinned to the cap...
    assert buffered_t[-1] - buffered_t[0] >= WINDOW_S - 2 * gap  # ...so the window stays covered


def test_buffer_capacity_resizes_and_rejects_nonsense() -> None:
    ring = RingBuffer(10, buffer_capacity=20)
    ring.add([Sample(i * 0.05, 0, {P: float(i)}, "buffer") for i in range(20)])
    ring.add([Sample(i * 0.5, 0, {P: -1.0}) for i in range(3)])
    ring.resize(10, 5)
    assert ring.buffer_capacity == 5 and ring.stats().buffer_samples == 5
    rec = ring.recording(-math.inf, math.inf)
    assert rec.series[0].values[P].tolist() == [-1.0, -1.0, 15.0, 16.0, 17.0, 18.0, 19.0, -1.0]
    ring.resize(12)  # the buffer ring keeps its size
    assert ring.buffer_capacity == 5 and ring.capacity == 12
    with pytest.raises(ValueError, match="buffer ring capacity must be >= 2"):
        RingBuffer(10, buffer_capacity=1)
    with pytest.raises(ValueError, match="buffer_max_rate_hz"):
        RingBuffer(10, buffer_max_rate_hz=0.0)
    assert buffer_capacity_for(60.0) == 3750  # 60 s x 50 rows/s x 1.25


def test_float32_rows_keep_seven_digits_and_the_counters_stay_exact() -> None:
    ring = RingBuffer(16)
    energy = 12_345_678.901  # a GPU's energy counter in J: read as differences of a few J
    mask = float(1 << 40)  # a clock event reason bit beyond float32's 24-bit mantissa
    for k in range(4):
        values = {
            Metric.POWER_AVG_W: 123.456 + k,
            Metric.ENERGY_J: energy + 0.125 * k,
            Metric.CLOCKS_EVENT_REASONS: mask + k,
            Metric.MEMORY_USED_BYTES: float((70_000 + k) << 20),
        }
        ring.add([Sample(float(k), 0, values)])
    got = ring.recording(0.0, 10.0).series[0].values
    assert all(v.dtype == np.float64 for v in got.values())
    np.testing.assert_array_equal(got[Metric.ENERGY_J], energy + 0.125 * np.arange(4))
    np.testing.assert_array_equal(got[Metric.CLOCKS_EVENT_REASONS], mask + np.arange(4))
    np.testing.assert_array_equal(
        got[Metric.MEMORY_USED_BYTES], (70_000 + np.arange(4)) * float(1 << 20)
    )
    np.testing.assert_allclose(got[Metric.POWER_AVG_W], 123.456 + np.arange(4), rtol=1e-7)
