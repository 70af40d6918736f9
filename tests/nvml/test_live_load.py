"""`record` and `diagnose` on a live host: the stage links and the engine's load.

The fake NVML reports the engine's PID on the GPUs, a fake /proc tree gives
that PID an SGLang command line with `--port` of a real HTTP server on
127.0.0.1 serving SGLang's metrics text, and the commands run in a subprocess.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from fake_nvml.fixtures import fake_env
from fake_nvml.timeline import ramp, serialized_pipeline

from bubblewatch.sources.trace import TraceReader

from .engine_server import EngineServer, SglangState, sglang_argv, write_proc

PID = 4242
SECRET = "sk-LIVEtestkey0123456789abcdefXYZ"


def _bw(env, *args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "bubblewatch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _host(lib, tmp_path, port, *, n_gpus=2, timeline=None, **faults):
    """Environment and --proc-root of a host running an SGLang PP`n_gpus` on `port`."""
    root = write_proc(tmp_path / "proc", PID, sglang_argv(port, n_gpus))
    tl = (timeline or ramp(n_gpus)).write(tmp_path / "t.bwtl")
    procs = ",".join(f"{g}:{PID}" for g in range(n_gpus))
    return fake_env(lib, tl, procs=procs, **faults), str(root)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _records(path):
    reader = TraceReader(path)
    return reader, [rec for _, rec in reader]


def test_record_writes_engine_load_and_stage_links(fake_nvml_lib, tmp_path):
    out = tmp_path / "rec.jsonl"
    with EngineServer(running=7, queued=12) as server:
        env, root = _host(fake_nvml_lib, tmp_path, server.port, nvlink=1)
        proc = _bw(env, "record", "-o", str(out), "--duration", "2", "--interval", "0.25",
                   "--proc-root", root, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["engine_metrics"]["url"] == f"http://127.0.0.1:{server.port}/metrics"
    reader, records = _records(out)
    loads = [r for r in records if r["type"] == "load"]
    assert len(loads) >= 2 and summary["engine_metrics"]["samples"] == len(loads)
    assert {(r["running"], r["queued"]) for r in loads} == {(7.0, 12.0)}
    header = reader.header
    assert header["topology"]["stages"] == [[0], [1]]
    assert header["topology"]["interconnect"] == "nvlink"
    assert header["meta"]["interconnect"]["links"] == [
        {"from_stage": 0, "to_stage": 1, "gpus": [0, 1], "kind": "nvlink", "pcie_level": None,
         "mixed": False}
    ]  # fmt: skip
    recording = TraceReader(out).read()
    assert len(recording.load) == len(loads)
    assert SECRET not in out.read_text() and SECRET not in proc.stdout + proc.stderr


def test_diagnose_json_shows_running_and_queued_in_its_evidence(fake_nvml_lib, tmp_path):
    with EngineServer(running=5, queued=3) as server:
        env, root = _host(fake_nvml_lib, tmp_path, server.port, topology_level=50)
        proc = _bw(env, "diagnose", "--duration", "2", "--interval", "0.25",
                   "--proc-root", root, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["evidence"]["running_requests"] == 5.0
    assert out["evidence"]["queued_requests"] == 3.0
    assert out["topology"]["interconnect"] == "pcie"
    assert out["interconnect"]["links"][0]["pcie_level"] == "cross-socket"
    assert out["engine_metrics"]["samples"] >= 2 and out["engine_metrics"]["failures"] == {}
    assert SECRET not in proc.stdout


def test_dead_endpoint_means_load_unknown_not_a_failure(fake_nvml_lib, tmp_path):
    out = tmp_path / "rec.jsonl"
    env, root = _host(fake_nvml_lib, tmp_path, _free_port())
    proc = _bw(env, "record", "-o", str(out), "--duration", "1.5", "--interval", "0.25",
               "--proc-root", root, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["engine_metrics"]["samples"] == 0
    assert summary["engine_metrics"]["failures"].get("connection", 0) >= 1
    assert "cannot connect" in summary["engine_metrics"]["last_error"]
    _, records = _records(out)
    assert not [r for r in records if r["type"] == "load"]
    assert summary["samples"] >= 10  # sampling went on at its own pace


def test_a_stalled_endpoint_never_holds_up_sampling(fake_nvml_lib, tmp_path):
    def timed(delay_s: float, where: str) -> tuple[subprocess.CompletedProcess[str], float]:
        with EngineServer(running=1, queued=0, delay_s=delay_s) as server:
            (tmp_path / where).mkdir()
            env, root = _host(fake_nvml_lib, tmp_path / where, server.port)
            t0 = time.monotonic()
            proc = _bw(env, "diagnose", "--duration", "2", "--interval", "0.25",
                       "--proc-root", root, "--json")  # fmt: skip
            return proc, time.monotonic() - t0

    # The same run against an endpoint that answers at once, as the yardstick of this
    # machine's start-up and join (a ratio within one run, not a wall-clock bound).
    _fast, baseline_s = timed(0.0, "fast")
    proc, took_s = timed(3.0, "stalled")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["engine_metrics"]["samples"] == 0
    assert out["engine_metrics"]["failures"].get("timeout", 0) >= 1
    assert out["evidence"]["running_requests"] is None
    assert out["n_samples"] >= 2 * 8  # ~8 ticks per GPU in 2 s at 0.25 s
    assert took_s < baseline_s + 2.0  # never waits out the 3 s stall of a read


def test_no_engine_metrics_flag_turns_polling_off(fake_nvml_lib, tmp_path):
    with EngineServer(running=7, queued=12) as server:
        env, root = _host(fake_nvml_lib, tmp_path, server.port)
        proc = _bw(env, "diagnose", "--duration", "1", "--interval", "0.25",
                   "--proc-root", root, "--no-engine-metrics", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "engine_metrics" not in out and server.scrapes == 0
    assert out["evidence"]["running_requests"] is None


@pytest.mark.slow
def test_serialized_under_one_request_is_load_limited_live(fake_nvml_lib, tmp_path):
    with EngineServer(running=1, queued=0) as server:
        env, root = _host(
            fake_nvml_lib, tmp_path, server.port, n_gpus=4, timeline=serialized_pipeline(4)
        )
        proc = _bw(env, "diagnose", "--duration", "12", "--interval", "0.25",
                   "--proc-root", root, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "serialized"
    assert out["load_limited"] is True
    # The stand-in serves two pp_rank series: SGLang's gauge counts one micro-batch (1
    # request), and about one micro-batch is in flight.
    ev = out["evidence"]
    assert ev["micro_batch_requests"] == 1.0
    assert ev["running_requests_source"] == "micro_batch_estimate"
    assert ev["running_requests"] == pytest.approx(max(1.0, ev["micro_batches_in_flight"]))
    assert ev["running_requests"] <= 1.5
    assert out["topology"]["stages"] == [[0], [1], [2], [3]]


def test_diagnose_reads_the_engines_live_settings_back_with_the_key_from_the_environment(
    fake_nvml_lib, tmp_path
):
    """The cap an operator set live (POST /set_internal_state) is read back, not the flag's."""
    state = SglangState("0.5.23", pp_size=2, max_running=16, api_key=SECRET)
    state.set({"pp_max_micro_batch_size": 3})  # changed live, after start
    with EngineServer(running=5, queued=3, state=state) as server:
        env, root = _host(fake_nvml_lib, tmp_path, server.port)
        args = ("diagnose", "--duration", "1", "--interval", "0.25", "--proc-root", root, "--json")
        unkeyed = _bw(env, *args)
        keyed = _bw({**env, "BUBBLEWATCH_ENGINE_API_KEY": SECRET}, *args)
    assert unkeyed.returncode == 0, unkeyed.stderr
    assert "401" in json.loads(unkeyed.stdout)["engine_live"]["error"]
    assert keyed.returncode == 0, keyed.stderr
    live = json.loads(keyed.stdout)["engine_live"]
    assert live["path"] == "/server_info" and live["version"] == "0.5.23"
    assert live["settings"] == {"pp_max_micro_batch_size": 3, "max_running_requests": 16,
                                "pp_async_batch_depth": 0}  # fmt: skip
    assert live["startup"].get("pp_max_micro_batch_size") is None  # the command line's: unset
    for proc in (unkeyed, keyed):
        assert SECRET not in proc.stdout + proc.stderr


def test_record_keeps_the_live_settings_beside_the_samples_and_analyze_joins_them(
    fake_nvml_lib, tmp_path
):
    """issue 18: `record` stores the engine's live state; `analyze` of the trace uses it."""
    from bubblewatch.analysis import analyse_window, target_for
    from bubblewatch.sources.engine_state import recorded_state

    state = SglangState("0.5.23", pp_size=2, max_running=16, api_key=SECRET)
    state.set({"pp_max_micro_batch_size": 3})  # changed live, after start
    out = tmp_path / "rec.jsonl"
    with EngineServer(running=5, queued=3, state=state) as server:
        env, root = _host(fake_nvml_lib, tmp_path, server.port)
        env = {**env, "BUBBLEWATCH_ENGINE_API_KEY": SECRET}
        proc = _bw(env, "record", "-o", str(out), "--duration", "1", "--interval", "0.25",
                   "--proc-root", root, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    reader, _ = _records(out)
    live = reader.header["meta"]["engine_live"]
    assert live["path"] == "/server_info" and live["version"] == "0.5.23"
    assert live["settings"]["pp_max_micro_batch_size"] == 3
    assert json.loads(proc.stdout)["engine_live_end"]["settings"] == live["settings"]
    assert SECRET not in out.read_text() and SECRET not in proc.stdout + proc.stderr
    recording = TraceReader(out).read()
    snapshot = recorded_state(recording.meta)
    assert snapshot is not None and snapshot.get("pp_max_micro_batch_size") == 3
    result = analyse_window(
        recording, target_for(recording.meta, recording.topology), live=snapshot
    )
    engine = result.facts.data["engine"]
    assert (
        engine["micro_batch_size"] == 3 and engine["settings_source"]["micro_batch_size"] == "live"
    )
