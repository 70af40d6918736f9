"""Limits sized for the peak load (issue 18): the peak of a load history, the daemon's day."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.model.recording import LoadSeries
from bubblewatch.rules.load_peak import LoadPeak, PeakTracker, load_peak


def _series(
    running: list[float], queued: list[float], micro: list[float] | None = None
) -> LoadSeries:
    t = np.arange(len(running), dtype=np.float64)
    mb = None if micro is None else np.asarray(micro, dtype=np.float64)
    return LoadSeries(
        t, np.asarray(running, dtype=np.float64), np.asarray(queued, dtype=np.float64), mb
    )


def test_peak_is_p95_of_running_plus_queued() -> None:
    # 100 readings: 88 with 8 running, 12 with 60 running and 4 queued: the p95 is 64.
    peak = load_peak(_series([8.0] * 88 + [60.0] * 12, [0.0] * 88 + [4.0] * 12))
    assert peak is not None
    assert peak.requests == pytest.approx(64.0)
    assert peak.span_s == 99.0 and peak.source == "recording"
    # One reading of a burst does not size the limit: 99 at 8, one at 500.
    spike = load_peak(_series([8.0] * 99 + [500.0], [0.0] * 100))
    assert spike is not None and spike.requests == pytest.approx(8.0)


def test_micro_batch_gauge_counts_every_micro_batch_in_flight() -> None:
    # SGLang with PP: the gauge shows one micro-batch (1 request), 8 are in flight, 56 wait.
    s = _series([1.0] * 10, [56.0] * 10, micro=[1.0] * 10)
    peak = load_peak(s, micro_batches_in_flight=8.0)
    assert peak is not None and peak.requests == pytest.approx(64.0)


def test_horizon_keeps_only_recent_readings() -> None:
    s = _series([100.0] * 10 + [4.0] * 10, [0.0] * 20)
    peak = load_peak(s, horizon_s=5.0)
    assert peak is not None and peak.requests == pytest.approx(4.0)


def test_no_running_reading_is_no_peak() -> None:
    assert load_peak(_series([float("nan")] * 3, [1.0] * 3)) is None
    assert load_peak(LoadSeries.empty()) is None


def test_daemon_tracker_holds_the_busiest_window_of_the_day() -> None:
    tr = PeakTracker(horizon_s=86_400.0)
    assert tr.add(0.0, LoadPeak(60.0, 60.0, "recording")) is not None
    later = tr.add(3_600.0, LoadPeak(8.0, 60.0, "recording"))
    assert later is not None and later.requests == 60.0 and later.source == "daemon"
    assert later.span_s == pytest.approx(3_660.0)
    # A day after the busy window it is forgotten.
    quiet = tr.add(90_000.0, LoadPeak(8.0, 60.0, "recording"))
    assert quiet is not None and quiet.requests == 8.0
    assert tr.add(90_060.0, None) is not None
