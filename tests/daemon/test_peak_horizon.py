"""analysis.peak_horizon reaches every pipeline's analyzer, at start and on a reload (issue 18)."""

from __future__ import annotations

from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.daemon.pipelines.discovery import Lookup
from bubblewatch.daemon.pipelines.tracker import PipelineTracker, set_peak_horizon
from bubblewatch.rules.load_peak import LoadPeak
from bubblewatch.topology.engine_config import EngineConfig


def _pipe(pid: str) -> Pipeline:
    return Pipeline(pid, None, EngineConfig("sglang", pp_size=8, version="0.5.15"))


def test_the_horizon_decides_which_busy_window_the_peak_holds() -> None:
    tracker = PipelineTracker(peak_horizon_s=3600.0)
    tracker.update(Lookup((_pipe("a"),), "test"), 0.0, initial=True)
    peaks = tracker.analyzers["a"]._peaks
    peaks.add(0.0, LoadPeak(200.0, 60.0, "recording"))
    # Two hours later, an hour's horizon has forgotten the busy window.
    later = peaks.add(7200.0, LoadPeak(10.0, 60.0, "recording"))
    assert later is not None and later.requests == 10.0


def test_a_reload_sets_the_horizon_of_running_and_new_analyzers() -> None:
    tracker = PipelineTracker()
    tracker.update(Lookup((_pipe("a"),), "test"), 0.0, initial=True)
    old = tracker.analyzers["a"]
    old._peaks.add(0.0, LoadPeak(200.0, 60.0, "recording"))
    set_peak_horizon(tracker, 7 * 86_400.0)
    # With a week's horizon the busy window of two days ago still sizes the limit.
    kept = old._peaks.add(2 * 86_400.0, LoadPeak(10.0, 60.0, "recording"))
    assert kept is not None and kept.requests == 200.0
    tracker.update(Lookup((_pipe("a"), _pipe("b")), "test"), 1.0)
    assert tracker.analyzers["a"] is old
    assert tracker.analyzers["b"].peak_horizon_s == 7 * 86_400.0
