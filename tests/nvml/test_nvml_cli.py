"""`bubblewatch record` and `diagnose` in a subprocess that loads the fake via LD_LIBRARY_PATH."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fake_nvml.fixtures import fake_env
from fake_nvml.timeline import ramp, serialized_pipeline

from bubblewatch.model.metrics import Metric
from bubblewatch.sources.trace import read_trace


def _bw(env, *args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "bubblewatch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_record_writes_a_trace_with_gpus_metrics_and_capabilities(fake_nvml_lib, tmp_path):
    tl = ramp(2).write(tmp_path / "t.bwtl")
    out = tmp_path / "rec.jsonl"
    env = fake_env(fake_nvml_lib, tl, no_gpm="1", xid="0@0.3:79")
    proc = _bw(env, "record", "-o", str(out), "--duration", "1.5", "--interval", "0.25", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["gpus"] == 2
    rec = read_trace(out)
    assert [g.uuid[-1] for g in rec.gpus] == ["0", "1"]
    assert len(rec.series[0].t_s) >= 5 and summary["samples"] == rec.n_samples
    assert rec.series[0].has(Metric.SM_ACTIVE_RATIO)
    assert not rec.series[1].has(Metric.SM_ACTIVE_RATIO)  # GPU 1 plays an older card
    assert rec.series[1].has(Metric.POWER_AVG_W)
    assert rec.meta["capabilities"]["1"]["missing"]["gpm"]
    assert [(e.kind, e.gpu, e.detail["xid"]) for e in rec.events] == [("xid", 0, 79)]
    assert rec.topology is None  # no engine process: topology unknown, said on stderr
    assert "topology unknown" in proc.stderr


def test_record_goes_on_when_a_gpu_is_lost(fake_nvml_lib, tmp_path):
    tl = ramp(2).write(tmp_path / "t.bwtl")
    out = tmp_path / "rec.jsonl.gz"
    env = fake_env(fake_nvml_lib, tl, lost="1@0.5")
    proc = _bw(env, "record", "-o", str(out), "--duration", "1.5", "--interval", "0.25")
    assert proc.returncode == 0, proc.stderr
    rec = read_trace(out)
    assert rec.series[0].t_s[-1] - rec.series[0].t_s[0] > 1.0
    assert rec.series[1].t_s[-1] - rec.series[0].t_s[0] < 0.75
    assert [(e.kind, e.gpu) for e in rec.events] == [("gpu_lost", 1)]
    assert rec.meta["lost_gpus"] == [1]
    assert rec.meta["nvml_errors"]["nvmlDeviceGetFieldValues"] == {"gpu_is_lost": 1}


@pytest.mark.parametrize("faults", [{}, {"init_error": 12}, {"no_gpus": 1}])
def test_diagnose_without_driver_says_so_and_suggests_simulate(fake_nvml_lib, tmp_path, faults):
    env = fake_env(fake_nvml_lib, ramp(1).write(tmp_path / "t.bwtl"), **faults)
    if not faults:
        del env["BUBBLEWATCH_FAKE_NVML_TIMELINE"]  # the fake then behaves as "driver not loaded"
    proc = _bw(env, "diagnose", "--duration", "1")
    assert proc.returncode == 1
    assert "no NVIDIA driver or GPU found" in proc.stderr
    assert "--simulate pp8-serialized" in proc.stderr
    assert proc.stdout == ""


def test_bad_interval_is_a_clear_error(fake_nvml_lib, tmp_path):
    env = fake_env(fake_nvml_lib, ramp(1).write(tmp_path / "t.bwtl"))
    proc = _bw(env, "record", "--interval", "0", "-o", str(tmp_path / "x.jsonl"))
    assert proc.returncode == 2
    assert "--interval" in proc.stderr and "must be > 0" in proc.stderr


@pytest.mark.slow
def test_diagnose_live_on_a_serialized_pipeline(fake_nvml_lib, tmp_path):
    # The stages are given as an operator gives them when no engine is discovered: the
    # fake's turns (50 ms) are faster than the 0.25 s samples, and whether their aliased
    # stagger alone makes a pipeline depends on the phase at which sampling starts.
    env = fake_env(fake_nvml_lib, serialized_pipeline(4).write(tmp_path / "t.bwtl"))
    proc = _bw(
        env, "diagnose", "--duration", "12", "--interval", "0.25", "--pp-size", "4", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["source"] == "live NVML"
    assert out["verdict"] == "serialized"
    assert out["evidence"]["pp_size"] == 4


@pytest.mark.slow
def test_diagnose_through_the_fake_agrees_with_analyze_on_the_same_scenario(
    fake_nvml_lib, tmp_path
):
    trace, tl = tmp_path / "sim.jsonl", tmp_path / "sim.bwtl"
    env = fake_env(fake_nvml_lib, tl)
    sim = _bw(
        env,
        "simulate",
        "pp8-serialized",
        "--duration",
        "20",
        "--interval",
        "0.5",
        "-o",
        str(trace),
        "--timeline",
        str(tl),
    )
    assert sim.returncode == 0, sim.stderr
    analyzed = _bw(env, "analyze", str(trace), "--pp-size", "8", "--json")
    assert analyzed.returncode == 0, analyzed.stderr
    live = _bw(env, "diagnose", "--duration", "14", "--interval", "0.5", "--pp-size", "8", "--json")
    assert live.returncode == 0, live.stderr
    a, d = json.loads(analyzed.stdout), json.loads(live.stdout)
    assert a["verdict"] == "serialized"
    assert d["verdict"] == a["verdict"]
    assert d["evidence"]["pp_size"] == a["evidence"]["pp_size"] == 8
