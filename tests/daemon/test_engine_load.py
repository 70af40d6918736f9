"""The daemon's engine load: pollers per pipeline, the analysis window, and the exported gauges.

Unit tests drive `EngineLoads` against real HTTP servers on 127.0.0.1; the
integration tests run the real daemon, on simulated GPUs (the simulator's own
load) and on the fake NVML with a stand-in SGLang launcher process whose
`--port` is a metrics server of the test's.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fake_nvml.fixtures import fake_env, fake_nvml_lib
from fake_nvml.timeline import serialized_pipeline
from nvml.engine_server import STUB_LAUNCHER, EngineServer

from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.daemon.sources.engineload import EngineLoads

from ._proc import metric, running, wait_for, write_config


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_polls_each_pipeline_and_windows_its_load() -> None:
    seen: list[tuple[str, float | None]] = []
    loads = EngineLoads(
        capacity=100, interval_s=0.05, on_sample=lambda p, s: seen.append((p, s.running))
    )
    with EngineServer(running=7, queued=12) as a, EngineServer(running=2, queued=0) as b:
        try:
            loads.update(
                [
                    Pipeline("a", None, None, _url(a.port)),
                    Pipeline("b", None, None, _url(b.port)),
                    Pipeline("no-endpoint", None),
                ]
            )
            assert loads.polled() == ("a", "b")
            wait_for(
                lambda: a.scrapes >= 3 and b.scrapes >= 3, timeout_s=5, what="three scrapes each"
            )
            now = time.time()
            sa = loads.series("a", now - 60, now + 1)
            assert sa is not None and len(sa) >= 3
            assert set(sa.running.tolist()) == {7.0} and set(sa.queued.tolist()) == {12.0}
            # Two pp_rank series: SGLang's gauge counts one micro-batch, and says so.
            assert sa.micro_batch is not None and set(sa.micro_batch.tolist()) == {7.0}
            assert np.all(np.diff(sa.t_s) > 0)
            assert loads.series("a", now + 10, now + 20) is not None  # polled, nothing in range
            assert loads.series("no-endpoint", 0, now + 1) is None
            last = loads.latest("b", time.time())
            assert last is not None and (last.running, last.queued) == (2.0, 0.0)
            assert {p for p, _ in seen} == {"a", "b"}
        finally:
            loads.close()
    assert loads.polled() == ()


def test_stale_or_dead_endpoint_is_unknown_and_never_blocks() -> None:
    loads = EngineLoads(capacity=10, interval_s=0.05, timeout_s=0.2, stale_after_s=1.0)
    with EngineServer(running=3, queued=1, delay_s=2.0) as slow:
        try:
            loads.update([Pipeline("dead", None, None, _url(_free_port())),
                          Pipeline("slow", None, None, _url(slow.port))])  # fmt: skip
            wait_for(lambda: slow.scrapes >= 1, timeout_s=5, what="a read of the slow endpoint")
            t0 = time.perf_counter()
            for pid in ("dead", "slow"):
                assert loads.latest(pid, time.time()) is None
                series = loads.series(pid, 0, time.time() + 1)
                assert series is not None and len(series) == 0
            assert time.perf_counter() - t0 < 0.05  # the caller never waits on the network
            wait_for(
                lambda: loads.failures()["dead"].get("connection"), timeout_s=5, what="a failure"
            )
        finally:
            loads.close()


def test_latest_goes_stale_and_a_changed_url_restarts_polling() -> None:
    loads = EngineLoads(capacity=10, interval_s=0.05, stale_after_s=0.5)
    with EngineServer(running=4, queued=0) as first, EngineServer(running=9, queued=5) as second:
        try:
            loads.update([Pipeline("p", None, None, _url(first.port))])
            wait_for(lambda: loads.latest("p", time.time()), timeout_s=5, what="a reading")
            last = loads.latest("p", time.time())
            assert last is not None and loads.latest("p", last.t_s + 0.6) is None
            loads.update([Pipeline("p", None, None, _url(second.port))])
            got = wait_for(
                lambda: (s := loads.latest("p", time.time())) and s.running == 9.0 and s,
                timeout_s=5,
                what="the new endpoint's reading",
            )
            assert got.queued == 5.0
            loads.update([])
            assert loads.polled() == ()
        finally:
            loads.close()


def test_rejects_a_nonsense_capacity() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        EngineLoads(capacity=0)


PIPELINE = "testhost/sglang:30000"


def test_simulated_daemon_exports_the_simulators_load(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bubblewatch.yml")
    with running(cfg) as d:
        m = wait_for(
            lambda: (
                (m := d.metrics())
                and metric(m, "bubblewatch_engine_running_requests", pipeline=PIPELINE) is not None
                and m
            ),
            timeout_s=30,
            what="the simulated engine's load on /metrics",
        )
        running_now = metric(m, "bubblewatch_engine_running_requests", pipeline=PIPELINE)
        queued_now = metric(m, "bubblewatch_engine_queued_requests", pipeline=PIPELINE)
        assert running_now is not None and running_now >= 2, d.log  # the scenario's C=8 load
        assert queued_now is not None and queued_now >= 0


@pytest.mark.slow
def test_simulated_serialized_pipeline_under_load_is_not_load_limited(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bubblewatch.yml")
    with running(cfg) as d:
        m = wait_for(
            lambda: (
                (m := d.metrics())
                and metric(m, "bubblewatch_pipeline_load_limited", pipeline=PIPELINE) is not None
                and m
            ),
            timeout_s=40,
            what="load_limited on the simulated serialized pipeline",
        )
        # Serialized under real load: a configuration problem, not too little work.
        assert metric(m, "bubblewatch_pipeline_load_limited", pipeline=PIPELINE) == 0.0
        assert (
            metric(m, "bubblewatch_pipeline_verdict", pipeline=PIPELINE, verdict="serialized")
            == 1.0
        )


@pytest.mark.slow
def test_live_daemon_polls_the_discovered_engine(tmp_path: Path, fake_nvml_lib) -> None:
    pkg = tmp_path / "pkg" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(STUB_LAUNCHER)
    with EngineServer(running=6, queued=4) as server:
        engine = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--model-path", "org/m",
             "--pp-size", "2", "--port", str(server.port), "--enable-metrics",
             "--api-key", "sk-DAEMONtestkey0123456789abcdef"],
            env={"PYTHONPATH": str(pkg.parent), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        try:
            tl = serialized_pipeline(2).write(tmp_path / "t.bwtl")
            env = fake_env(fake_nvml_lib, tl, procs=f"0:{engine.pid},1:{engine.pid}", nvlink=1)
            # The default 30 s history: the driver's buffered rows have a ring of their own
            # (they used to crowd the history out of the poll ring: insufficient_data forever).
            cfg = write_config(tmp_path / "bubblewatch.yml", simulate=None)
            with running(cfg, env=env) as d:
                m = wait_for(
                    lambda: (
                        (m := d.metrics())
                        and metric(m, "bubblewatch_engine_running_requests")
                        and metric(m, "bubblewatch_pipeline_info")
                        and m
                    ),
                    timeout_s=40,
                    what="the engine's running requests on /metrics",
                )
                assert metric(m, "bubblewatch_engine_queued_requests") == 4.0
                assert metric(m, "bubblewatch_engine_running_requests") == 6.0
                pipeline = next(k for k in m if k.startswith("bubblewatch_engine_running_requests"))
                assert f"sglang:{server.port}" in pipeline  # one pipeline, named by its port
                assert (
                    metric(m, "bubblewatch_pipeline_info", pp_size="2", tp_size="1",
                           interconnect="nvlink")
                    == 1.0
                ), [k for k in m if k.startswith("bubblewatch_pipeline_info")]  # fmt: skip
                # The analysis saw the load: serialized with 6 running and 4 queued is a
                # configuration problem, not too little work.
                later = wait_for(
                    lambda: (
                        (m := d.metrics())
                        and metric(m, "bubblewatch_pipeline_load_limited") is not None
                        and m
                    ),
                    timeout_s=40,
                    what="a serialized verdict with load_limited",
                )
                assert metric(later, "bubblewatch_pipeline_load_limited") == 0.0
                assert metric(later, "bubblewatch_pipeline_verdict", verdict="serialized") == 1.0
                assert "sk-DAEMONtestkey" not in d.log
        finally:
            engine.kill()
            engine.wait(10)


__all__ = ["fake_nvml_lib"]  # the fixture, for the live test


def test_pipeline_dashboard_has_an_engine_load_panel() -> None:
    import json

    from bubblewatch.sinks.prometheus import SPECS

    path = Path(__file__).resolve().parents[2] / "dashboards" / "bubblewatch-pipeline.json"
    panels = {p["title"]: p for p in json.loads(path.read_text())["panels"]}
    exprs = [t["expr"] for t in panels["Engine load"]["targets"]]
    names = {s.name for s in SPECS}
    for gauge in ("bubblewatch_engine_running_requests", "bubblewatch_engine_queued_requests"):
        assert gauge in names
        assert any(e.startswith(gauge + "{") and 'pipeline="$pipeline"' in e for e in exprs)
