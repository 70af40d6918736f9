"""The daemon's read-back of the engines' live settings: changes seen, taken, compared.

`EngineStates` reads a stand-in SGLang engine over real HTTP on 127.0.0.1
(tests/nvml/engine_server.py); the operator's live change is a real
`POST /set_internal_state`. The effect is judged on simulated windows before and
after the change, as the daemon judges it (PipelineTracker, ChangeWatch).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fake_nvml.fixtures import fake_env, fake_nvml_lib
from fake_nvml.timeline import serialized_pipeline
from nvml.engine_server import STUB_LAUNCHER, EngineServer, SglangState
from prometheus_client import generate_latest

from bubblewatch.daemon.loop.publish import engine_settings, live_change_counts
from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineAnalyzer
from bubblewatch.daemon.pipelines.discovery import Lookup
from bubblewatch.daemon.pipelines.tracker import PipelineTracker
from bubblewatch.daemon.sources.enginestate import EngineStates, LiveChange
from bubblewatch.errors import InputError
from bubblewatch.rules import RuleEngine, build_facts
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sinks.snapshot import ExporterSnapshot
from bubblewatch.sources.engine_state import KEY_ENV, KEY_FILE_ENV, engine_api_key
from bubblewatch.sources.trace import TraceReader
from bubblewatch.topology.engine_config import EngineConfig

from ._proc import metric, running, wait_for, write_config

__all__ = ["fake_nvml_lib"]  # the fixture, for the live test

PID = "h/sglang"
WINDOW_S = 15.0


def _set(port: int, cap_key: str, value: int) -> list[bool]:
    body = json.dumps({"server_args": {cap_key: value}}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/set_internal_state", data=body, method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return list(json.loads(resp.read()))


def _pipeline(port: int, version: str | None) -> Pipeline:
    engine = EngineConfig("sglang", pp_size=8, version=version, port=port)
    return Pipeline(PID, None, engine)


def _wait(cond, what: str, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if v := cond():
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("version", ["0.5.3", "0.5.14", "0.5.15", "0.5.23"])
def test_a_live_change_is_seen_confirmed_and_counted_a_refused_one_is_not(version: str) -> None:
    st = SglangState(version, pp_size=8, max_running=64, cap=1)
    with EngineServer(0, 0, state=st) as server:
        states = EngineStates(interval_s=0.05, timeout_s=1.0)
        try:
            states.update([_pipeline(server.port, version)])
            first = _wait(lambda: states.latest(PID), "the first read-back")
            assert first.get("pp_max_micro_batch_size") == 1
            # Out of range [1, 64 // 8]: refused, so nothing changes, whatever the reply.
            assert _set(server.port, st.cap_key, 9) == [version in ("0.5.3", "0.5.14")]
            time.sleep(0.3)
            assert states.take_changes() == []
            assert _set(server.port, st.cap_key, 8) == [True]
            changes: list[LiveChange] = _wait(states.take_changes, "the live change")
        finally:
            states.close()
    (change,) = changes
    assert change.pipeline == PID and dict(change.settings) == {"pp_max_micro_batch_size": (1, 8)}
    assert change.result.status == "taken", change.result
    assert change.log_fields()["changed"] == "pp_max_micro_batch_size=1->8"
    assert states.counts() == {(PID, "pp_max_micro_batch_size", "taken"): 1}
    latest = states.latest(PID)
    assert latest is not None and latest.get("pp_max_micro_batch_size") == 8


def _read_pipelines(states: EngineStates) -> tuple[str, ...]:
    """The pipelines `states` reads back now (its own table: nothing outside asks for it)."""
    with states._lock:
        return tuple(sorted(states._engines))


def test_rediscovery_reads_at_once_and_drops_engines_gone() -> None:
    st = SglangState("0.5.15", pp_size=8, max_running=64)
    with EngineServer(0, 0, state=st) as server:
        states = EngineStates(interval_s=3600.0)  # only the pokes read
        try:
            states.update([_pipeline(server.port, "0.5.15")])
            _wait(lambda: states.latest(PID), "the read at discovery")
            n = len(server.requests)
            states.update([_pipeline(server.port, "0.5.15")])
            _wait(lambda: len(server.requests) > n, "a read at rediscovery")
            states.update([Pipeline(PID, None, EngineConfig("vllm", port=server.port))])
            assert _read_pipelines(states) == () and states.latest(PID) is None
        finally:
            states.close()


def test_a_restart_with_new_flags_is_read_afresh_not_taken_for_a_live_change() -> None:
    """Regression: the restarted engine's first read-back was compared with the old one's."""
    st = SglangState("0.5.15", pp_size=8, max_running=64)
    with EngineServer(0, 0, state=st) as server:
        states = EngineStates(interval_s=0.05, stale_after_s=5.0)
        try:
            states.update([_pipeline(server.port, "0.5.15")])
            old = _wait(lambda: states.latest(PID), "the first read-back")
            st.cap = 2  # the engine restarts with --pp-max-micro-batch-size 2
            restarted = EngineConfig(
                "sglang", pp_size=8, version="0.5.15", port=server.port, pp_max_micro_batch_size=2
            )
            states.update([Pipeline(PID, None, restarted)])
            _wait(
                lambda: (x := states.latest(PID)) and x.get("pp_max_micro_batch_size") == 2,
                "the restarted engine's read-back",
            )
            time.sleep(0.3)
            assert states.take_changes() == [] and states.counts() == {}
        finally:
            states.close()
    assert old.get("pp_max_micro_batch_size") == 8
    # Stale once the engine stops answering for a few reads.
    new = states.latest(PID)
    assert new is not None and states.latest(PID, new.t_s + 4.0) is new
    assert states.latest(PID, new.t_s + 6.0) is None


def test_the_api_key_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert engine_api_key({}) is None
    assert engine_api_key({KEY_ENV: " sk-1 \n"}) == "sk-1"
    f = tmp_path / "key"
    f.write_text("sk-2\n")
    assert engine_api_key({KEY_FILE_ENV: str(f)}) == "sk-2"
    with pytest.raises(InputError, match="cannot read the engine API key"):
        engine_api_key({KEY_FILE_ENV: str(tmp_path / "missing")})


def _window(cap: int, start_s: float):  # type: ignore[no-untyped-def]
    sc = apply_overrides(
        load_scenario("pp8-serialized"),
        {"workload.concurrency": 64, "parallel.pp_max_micro_batch_size": cap},
    )
    return observe(simulate(sc, duration_s=20.0, seed=0), interval_s=1.0, start_epoch_s=start_s)


def test_a_live_change_is_compared_a_window_later_and_exported(tmp_path: Path) -> None:
    """Cap 1 -> 8 with 64 concurrent requests, read back from the engine and compared."""
    rules = RuleEngine()
    assert rules.reload().ok  # the shipped rules
    st = SglangState("0.5.15", pp_size=8, max_running=128, cap=1)
    with EngineServer(0, 0, state=st) as server:
        pipe = _pipeline(server.port, "0.5.15")
        states = EngineStates(interval_s=0.05)
        tracker = PipelineTracker()
        tracker.changes.keep_s = 100.0
        tracker.update(Lookup((pipe,), "test"), 0.0, initial=True)
        try:
            states.update([pipe])
            before_live = _wait(lambda: states.latest(PID), "the read-back")
            before = _window(1, 1000.0)
            analyzer: PipelineAnalyzer = tracker.analyzers[PID]
            res = analyzer.step(before, rules, before.end_s, live=before_live)
            assert tracker.changes.observe(res, before.end_s, WINDOW_S) is None
            _set(server.port, st.cap_key, 8)
            (change,) = _wait(states.take_changes, "the live change")
            assert tracker.live_changed(PID, before.end_s + 1.0, change.settings)
            assert tracker.valid_from[PID] == before.end_s + 1.0
            after = _window(8, before.end_s + 1.0)
            after_live = states.latest(PID)
            res2 = analyzer.step(after, rules, after.end_s, live=after_live)
            assert after.end_s - (before.end_s + 1.0) >= WINDOW_S  # a full window after
            outcome = tracker.changes.observe(res2, after.end_s, WINDOW_S)
            settings = engine_settings([pipe], states)
            counts = live_change_counts(states)
        finally:
            states.close()
    assert outcome is not None
    fields = outcome.log_fields()
    assert fields["changed"] == "pp_max_micro_batch_size=1->8"
    assert fields["verdict_before"] == res.diagnosis.verdict.value
    print(fields)  # the measured figures (pytest -s)
    ratio = outcome.concurrency_ratio
    assert ratio is not None and ratio > 1.5, fields  # more micro-batches in flight
    # The rules saw the live cap: before it, the cap of 1 that the command line never set.
    facts = build_facts(res.diagnosis, pipe.engine, None, live=before_live)
    assert facts.get("engine.pp_max_micro_batch_size") == 1
    assert facts.get("engine.settings_source")["pp_max_micro_batch_size"] == "live"
    assert (
        build_facts(res.diagnosis, pipe.engine, None).get("engine.pp_max_micro_batch_size") is None
    )
    text = make_registry(lambda: ExporterSnapshot(engine_settings=settings, live_changes=counts))
    out = generate_latest(text).decode()
    assert (
        f'bubblewatch_engine_setting{{pipeline="{PID}",setting="pp_max_micro_batch_size",'
        'source="live"} 8.0'
    ) in out
    assert (
        f'bubblewatch_engine_live_changes_total{{pipeline="{PID}",'
        'result="taken",setting="pp_max_micro_batch_size"} 1.0'
    ) in out


@pytest.mark.slow
def test_live_daemon_reads_the_engine_back_and_judges_a_live_change(
    tmp_path: Path, fake_nvml_lib: Path
) -> None:
    """The real daemon on the fake NVML: discovery finds the stand-in engine's port, the
    daemon reads its settings with the key from the environment, and an operator's
    POST /set_internal_state shows up as a taken live change, compared a window later."""
    pkg = tmp_path / "pkg" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(STUB_LAUNCHER)
    key = "sk-READBACKtestkey0123456789abcdef"
    st = SglangState("0.5.15", pp_size=2, max_running=16, api_key=key)
    with EngineServer(6, 4, state=st) as server:
        engine = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--model-path", "org/m",
             "--pp-size", "2", "--port", str(server.port), "--enable-metrics",
             "--api-key", key],
            env={"PYTHONPATH": str(pkg.parent), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        try:
            tl = serialized_pipeline(2).write(tmp_path / "t.bwtl")
            env = fake_env(fake_nvml_lib, tl, procs=f"0:{engine.pid},1:{engine.pid}", nvlink=1)
            env[KEY_ENV] = key
            trace = tmp_path / "run.jsonl"
            cfg = write_config(tmp_path / "bubblewatch.yml", simulate=None,
                               record={"path": str(trace)})  # fmt: skip
            with running(cfg, env=env) as d:
                m = wait_for(
                    lambda: (
                        (m := d.metrics())
                        and metric(
                            m,
                            "bubblewatch_engine_setting",
                            setting="micro_batch_size",
                            source="live",
                        )
                        and metric(m, "bubblewatch_pipeline_verdict", verdict="serialized")
                        and m
                    ),
                    timeout_s=40,
                    what="the engine's live cap and a verdict on /metrics",
                )
                # The scheduler's default, max(16 // 2, 1): read back, not guessed.
                live = {"setting": "micro_batch_size", "source": "live"}
                assert metric(m, "bubblewatch_engine_setting", **live) == 8.0
                assert metric(m, "bubblewatch_engine_setting", setting="max_running_requests",
                              source="live") == 16.0  # fmt: skip
                body = json.dumps({"server_args": {"pp_max_micro_batch_size": 2}}).encode()
                req = urllib.request.Request(
                    f"http://127.0.0.1:{server.port}/set_internal_state", data=body,
                    headers={"Authorization": f"Bearer {key}"}, method="POST",
                )  # fmt: skip
                with urllib.request.urlopen(req, timeout=5) as resp:
                    assert json.loads(resp.read()) == [True]
                m = wait_for(
                    lambda: (
                        (m := d.metrics())
                        and metric(m, "bubblewatch_engine_live_changes_total", result="taken")
                        and metric(m, "bubblewatch_pipeline_change_timestamp_seconds")
                        and m
                    ),
                    timeout_s=40,
                    what="the live change, taken and compared a window later",
                )
                assert metric(m, "bubblewatch_engine_setting", **live) == 2.0
                assert metric(m, "bubblewatch_engine_setting", setting="pp_max_micro_batch_size",
                              source="live") == 2.0  # fmt: skip
                log = d.log
                assert "engine setting changed live" in log
                assert "pp_max_micro_batch_size=8->2" in log
                assert "engine change compared" in log
                assert key not in log
                # The daemon's reads carried the key (the version probe sends none).
                assert ("/server_info", f"Bearer {key}") in server.requests
            # The recording holds the change as an event (flushed after each analysis).
            events = [e for e in TraceReader(trace).read().events
                      if e.kind == "engine_setting_change"]  # fmt: skip
            assert [dict(e.detail) for e in events] == [{
                "pipeline": f"testhost/sglang:{server.port}", "result": "taken",
                "settings": {"pp_max_micro_batch_size": [8, 2]},
            }]  # fmt: skip
            assert key not in trace.read_text()
        finally:
            engine.kill()
            engine.wait(10)
