"""ChangeWatch: before and after an engine restart with new settings, judged once."""

from __future__ import annotations

import pytest

from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineResult
from bubblewatch.daemon.pipelines.change import ChangeWatch
from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.rules import ExpectedGain, Recommendation, Severity

from .fakes import FakeClock, FakeSource

PID = "h/sglang:30000"
PIPE = Pipeline(PID, None)
DEPTH = {"pp_async_batch_depth": (0, 8)}


def result(
    verdict: Verdict, concurrency: float | None = None, *, gain: float | None = None
) -> PipelineResult:
    """A result as the analyzer makes it; `gain`: a rule fired predicting x`gain` concurrency."""
    ev: dict[str, object] = {"pp_size": 8}
    if concurrency is not None:
        ev |= {"concurrency": concurrency, "bubble_ratio": 1 - concurrency / 8}
    diag = Diagnosis(
        verdict,
        0.9,
        (),
        (),
        10.5,
        50,
        load_limited=False if verdict is Verdict.SERIALIZED else None,
        evidence=ev,  # type: ignore[arg-type]
    )
    recs = () if gain is None else (
        Recommendation("PpAsyncDepth", Severity.WARNING, "", expected_gain=ExpectedGain(
            "concurrency", gain)),
    )  # fmt: skip
    return PipelineResult(PIPE, diag, recs, 0.0)


def test_judged_once_a_full_window_after_the_change_with_the_last_real_verdict() -> None:
    w = ChangeWatch(keep_s=80.0, settle_s=600.0)
    w.observe(result(Verdict.SERIALIZED, 1.0), 100.0, 10.5)
    # The engine was down for the windows before the restart was noticed.
    w.observe(result(Verdict.IDLE, 0.0), 110.0, 10.5)
    w.observe(result(Verdict.INSUFFICIENT_DATA), 120.0, 10.5)
    assert w.engine_changed(PID, 125.0, DEPTH)
    assert w.observe(result(Verdict.HEALTHY, 6.0), 135.0, 10.5) is None  # window not full
    out = w.observe(result(Verdict.HEALTHY, 6.0), 135.6, 10.5)
    assert out is not None
    assert out.comparison.before.verdict == "serialized"  # the idle windows were skipped
    assert out.borne_out is True
    assert out.concurrency_ratio == pytest.approx(6.0)
    fields = out.log_fields()
    assert fields["verdict_before"] == "serialized" and fields["verdict_after"] == "healthy"
    assert fields["concurrency_before"] == "1" and fields["concurrency_after"] == "6"
    assert fields["bubble_ratio_before"] == "0.875" and fields["bubble_ratio_after"] == "0.25"
    assert fields["borne_out"] == "true"
    assert fields["changed"] == "pp_async_batch_depth=0->8"
    assert w.observe(result(Verdict.HEALTHY, 6.0), 136.6, 10.5) is None  # once
    assert w.outcomes()[PID] is out and not w.pending(PID)


def test_a_fix_that_did_not_help_is_not_borne_out() -> None:
    w = ChangeWatch(keep_s=80.0, settle_s=0.0)
    w.observe(result(Verdict.SERIALIZED, 1.0), 100.0, 10.5)
    assert w.engine_changed(PID, 101.0, DEPTH)
    out = w.observe(result(Verdict.SERIALIZED, 1.1), 112.0, 10.5)
    assert out is not None and out.borne_out is False
    assert out.log_fields()["borne_out"] == "false"


@pytest.mark.parametrize(("gain", "borne_out"), [(None, False), (2.0, True)])
def test_the_recommendations_that_fired_before_set_the_prediction(
    gain: float | None, borne_out: bool
) -> None:
    """Concurrency 1 -> 1.6: short of the default (pp_size 8) but half of a predicted x2."""
    w = ChangeWatch(keep_s=80.0, settle_s=0.0)
    w.observe(result(Verdict.SERIALIZED, 1.0, gain=gain), 100.0, 10.5)
    w.engine_changed(PID, 101.0, DEPTH)
    out = w.observe(result(Verdict.HEALTHY, 1.6), 112.0, 10.5)
    assert out is not None and out.borne_out is borne_out


def test_after_waits_for_a_serving_engine_then_settles() -> None:
    w = ChangeWatch(keep_s=80.0, settle_s=60.0)
    w.observe(result(Verdict.SERIALIZED, 1.0), 100.0, 10.5)
    w.engine_changed(PID, 100.0, DEPTH)
    # Loading weights: idle windows are not judged until settle_s has passed...
    assert w.observe(result(Verdict.IDLE, 0.0), 120.0, 10.5) is None
    assert w.observe(result(Verdict.IDLE, 0.0), 159.0, 10.5) is None
    out = w.observe(result(Verdict.IDLE, 0.0), 160.0, 10.5)
    assert out is not None and out.comparison.after.verdict == "idle"
    assert out.borne_out is False  # the predicted healthy verdict did not come


def test_no_before_means_nothing_to_judge() -> None:
    w = ChangeWatch(keep_s=30.0, settle_s=0.0)
    w.observe(result(Verdict.SERIALIZED, 1.0), 100.0, 10.5)
    assert not w.engine_changed(PID, 200.0, DEPTH)  # too old to stand for the old engine
    assert w.observe(result(Verdict.HEALTHY, 6.0), 220.0, 10.5) is None
    assert w.outcomes() == {}
    with pytest.raises(ValueError, match="keep_s"):
        ChangeWatch(keep_s=0.0, settle_s=1.0)


def test_second_change_before_judging_keeps_the_first_before() -> None:
    w = ChangeWatch(keep_s=80.0, settle_s=0.0)
    w.observe(result(Verdict.SERIALIZED, 1.0), 100.0, 10.5)
    w.engine_changed(PID, 101.0, DEPTH)
    w.observe(result(Verdict.SERIALIZED, 2.0), 105.0, 10.5)
    w.engine_changed(PID, 106.0, {"pp_async_batch_depth": (8, 4), "cuda_graph": (False, True)})
    assert w.observe(result(Verdict.HEALTHY, 5.0), 115.0, 10.5) is None  # 9 s after the 2nd
    out = w.observe(result(Verdict.HEALTHY, 5.0), 117.0, 10.5)
    assert out is not None and out.comparison.before.concurrency == 1.0
    assert out.settings == {"pp_async_batch_depth": (0, 4), "cuda_graph": (False, True)}


def test_restart_is_noticed_when_a_rediscovery_ran_while_the_engine_was_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's pipeline vanishes for one rediscovery (down), then returns with depth 8."""
    from bubblewatch.daemon.config.file import load_config
    from bubblewatch.daemon.config.web import WebSettings
    from bubblewatch.daemon.loop import lookup, run
    from bubblewatch.daemon.pipelines.discovery import Lookup
    from bubblewatch.rules import RuleEngine
    from bubblewatch.topology.engine_config import EngineConfig

    def engine(depth: int) -> Lookup:
        return Lookup(
            (Pipeline(PID, None, EngineConfig("sglang", 8, pp_async_batch_depth=depth)),), "t"
        )

    lookups = [engine(0), Lookup((Pipeline("h/gpus", None),), "t"), engine(8)]
    monkeypatch.setattr(lookup, "discover_pipelines", lambda *a, **k: lookups.pop(0))

    cfg = load_config(None, {"--web.listen-address": "127.0.0.1:0"}, env={})
    clock = FakeClock(wall0_s=100.0)  # the first discovery runs as the daemon opens, at 100.0
    source = FakeSource(clock, n_gpus=0, simulated=False)
    d = run.Daemon(cfg, WebSettings(), RuleEngine(), source, clock=clock, env={})
    d.pipelines.changes.observe(result(Verdict.SERIALIZED, 1.0), 100.0, 10.5)
    d._rediscover(160.0)  # engine down: only the GPUs-as-one-pipeline fallback
    d._rediscover(220.0)  # back with new settings
    d.close()
    assert d.pipelines.valid_from[PID] == 220.0
    assert d.pipelines.changes.pending(PID)
