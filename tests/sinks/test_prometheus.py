"""The exporter's exposition: names, values, labels, no secrets, promtool-clean."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bubblewatch.detect.types import Diagnosis, StageStats, Verdict
from bubblewatch.model import GpuInfo, Metric, Topology
from bubblewatch.sinks.alerts import ReceiverStats
from bubblewatch.sinks.prometheus import SPECS, make_registry
from bubblewatch.sinks.snapshot import (
    ActiveRecommendation,
    BubbleEnergyIntegrator,
    EngineLoadState,
    ExporterSnapshot,
    GpuState,
    Health,
    pipeline_state,
)
from bubblewatch.topology.engine_config import EngineConfig

SECRET = "sk-live-abcdef123456"


def diagnosis() -> Diagnosis:
    stages = tuple(
        StageStats(s, (s,), 0.125 + 0.001 * s, 0.1, 0.9, 180.0, 90.0, 0.8, 0.02 * s, 50.0)
        for s in range(4)
    )
    return Diagnosis(
        Verdict.SERIALIZED,
        0.92,
        (),
        stages,
        60.0,
        240,
        evidence={"concurrency": 0.506, "bubble_ratio": 0.8735},
    )


def snapshot() -> ExporterSnapshot:
    topo = Topology.from_sizes(4, 1, pipeline_id="host-a/sglang:30000", interconnect="pcie")
    engine = EngineConfig(
        "sglang",
        pp_size=4,
        pp_async_batch_depth=0,
        cuda_graph=False,
        argv=("--api-key", SECRET),
        env={"HF_TOKEN": SECRET},
        flags={"api-key": SECRET},
    )
    gpus = tuple(
        GpuState(
            GpuInfo(i, f"GPU-{i}", "NVIDIA RTX PRO 6000", 600.0, "", f"0000:0{i}:00.0"),
            {
                Metric.POWER_INSTANT_W: 150.0 + i,
                Metric.SM_CLOCK_MHZ: 2100.0,
                Metric.SM_ACTIVE_RATIO: 0.1,
                Metric.ENERGY_J: 5e6 + i,
                Metric.CLOCKS_EVENT_REASONS: float(0x4 | 0x20) if i == 2 else 0.0,
            },
            topo.pipeline_id,
            i,
        )
        for i in range(4)
    )
    pipe = pipeline_state(
        topo.pipeline_id,
        diagnosis(),
        bubble_energy_joules_total=4321.0,
        topology=topo,
        engine=engine,
    )
    return ExporterSnapshot(
        gpus=gpus,
        pipelines=(pipe,),
        recommendations=(ActiveRecommendation(topo.pipeline_id, "pp_async_depth", "critical"),),
        receivers=(
            ReceiverStats("ops", {"success": 4, "error": 2, "timeout": 1, "rejected": 0}, 3, 1),
        ),
        health=Health(
            1.7e9,
            0.0015,
            0.012,
            {("nvmlDeviceGetFieldValues", "NotSupported"): 7},
            True,
            1.69e9,
            1000,
            config_reloads={"applied": 2, "refused": 1, "invalid": 0},
            config_restart_required=("web.listen_address",),
        ),
        version="0.1.0",
    )


def scrape(snap: ExporterSnapshot) -> str:
    return generate_latest(make_registry(lambda: snap)).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_exposition_values_and_labels() -> None:
    s = samples(scrape(snapshot()))
    pid = "host-a/sglang:30000"
    assert s[("bubblewatch_gpu_power_watts", (("gpu", "1"),))] == 151.0
    assert s[("bubblewatch_gpu_sm_clock_hertz", (("gpu", "0"),))] == 2.1e9
    assert s[("bubblewatch_gpu_energy_joules_total", (("gpu", "3"),))] == 5e6 + 3
    assert s[("bubblewatch_gpu_clocks_event_reason", (("gpu", "2"), ("reason", "sw_thermal")))] == 1
    assert (
        s[("bubblewatch_gpu_clocks_event_reason", (("gpu", "2"), ("reason", "hw_slowdown")))] == 0
    )
    assert (
        s[("bubblewatch_gpu_clocks_event_reason", (("gpu", "0"), ("reason", "sw_power_cap")))] == 0
    )
    assert s[("bubblewatch_stage_occupancy_ratio", (("pipeline", pid), ("stage", "3")))] == 0.128
    assert s[("bubblewatch_stage_lag_seconds", (("pipeline", pid), ("stage", "2")))] == 0.04
    assert s[("bubblewatch_pipeline_concurrency", (("pipeline", pid),))] == 0.506
    assert s[("bubblewatch_pipeline_bubble_ratio", (("pipeline", pid),))] == 0.8735
    verdicts = {
        dict(k[1])["verdict"]: v for k, v in s.items() if k[0] == "bubblewatch_pipeline_verdict"
    }
    assert verdicts == {v.value: float(v is Verdict.SERIALIZED) for v in Verdict}
    assert s[("bubblewatch_pipeline_verdict_confidence", (("pipeline", pid),))] == 0.92
    assert s[("bubblewatch_pipeline_bubble_energy_joules_total", (("pipeline", pid),))] == 4321.0
    assert (
        s[
            (
                "bubblewatch_recommendation_active",
                (("pipeline", pid), ("rule", "pp_async_depth"), ("severity", "critical")),
            )
        ]
        == 1
    )
    assert (
        s[
            (
                "bubblewatch_nvml_errors_total",
                (("call", "nvmlDeviceGetFieldValues"), ("code", "NotSupported")),
            )
        ]
        == 7
    )
    assert (
        s[("bubblewatch_webhook_deliveries_total", (("outcome", "timeout"), ("receiver", "ops")))]
        == 1
    )
    assert s[("bubblewatch_webhook_queue_length", (("receiver", "ops"),))] == 3
    assert s[("bubblewatch_alerts_dropped_total", (("receiver", "ops"),))] == 1
    assert s[("bubblewatch_config_last_reload_successful", ())] == 1
    assert s[("bubblewatch_config_reloads_total", (("result", "refused"),))] == 1
    assert s[("bubblewatch_config_reloads_total", (("result", "invalid"),))] == 0
    assert s[("bubblewatch_config_restart_required", (("setting", "web.listen_address"),))] == 1
    assert s[("bubblewatch_last_sample_timestamp_seconds", ())] == 1.7e9
    engine = [dict(k[1]) for k in s if k[0] == "bubblewatch_engine_info"]
    assert engine == [
        {
            "pipeline": pid,
            "engine": "sglang",
            "version": "",
            "pp_size": "4",
            "tp_size": "1",
            "ep_size": "1",
            "cuda_graph": "false",
            "pp_async_batch_depth": "0",
            "pp_max_micro_batch_size": "",
        }
    ]
    info = [dict(k[1]) for k in s if k[0] == "bubblewatch_gpu_info"]
    assert info[2] == {
        "gpu": "2",
        "uuid": "GPU-2",
        "name": "NVIDIA RTX PRO 6000",
        "pci_bus_id": "0000:02:00.0",
        "pipeline": pid,
        "stage": "2",
    }


def test_engine_load_and_load_limited_gauges() -> None:
    pid = "host-a/sglang:30000"
    limited = replace(diagnosis(), load_limited=True)
    snap = replace(
        snapshot(),
        pipelines=(
            pipeline_state(pid, limited),
            pipeline_state("other", replace(limited, load_limited=None)),
        ),
        engine_loads=(EngineLoadState(pid, 1.0, 0.0), EngineLoadState("other", 12.0, None)),
    )
    s = samples(scrape(snap))
    assert s[("bubblewatch_pipeline_load_limited", (("pipeline", pid),))] == 1.0
    assert s[("bubblewatch_engine_running_requests", (("pipeline", pid),))] == 1.0
    assert s[("bubblewatch_engine_queued_requests", (("pipeline", pid),))] == 0.0
    assert s[("bubblewatch_engine_running_requests", (("pipeline", "other"),))] == 12.0
    # Unknown is absent, never 0.
    assert ("bubblewatch_pipeline_load_limited", (("pipeline", "other"),)) not in s
    assert ("bubblewatch_engine_queued_requests", (("pipeline", "other"),)) not in s
    under_load = pipeline_state(pid, replace(diagnosis(), load_limited=False))
    s = samples(scrape(ExporterSnapshot(pipelines=(under_load,))))
    assert s[("bubblewatch_pipeline_load_limited", (("pipeline", pid),))] == 0.0
    assert not any(k[0].startswith("bubblewatch_engine_") for k in s)


def test_secrets_never_exported() -> None:
    text = scrape(snapshot())
    assert SECRET not in text
    assert "api-key" not in text and "HF_TOKEN" not in text


def test_absent_metric_is_absent_not_zero() -> None:
    snap = ExporterSnapshot(gpus=(GpuState(GpuInfo(0), {Metric.POWER_AVG_W: 90.0}),))
    text = scrape(snap)
    assert 'bubblewatch_gpu_power_average_watts{gpu="0"} 90.0' in text
    assert "bubblewatch_gpu_power_watts" not in text
    assert "bubblewatch_gpu_clocks_event_reason" not in text
    assert "bubblewatch_last_sample_timestamp_seconds" not in text  # never sampled yet


def test_metric_names_follow_conventions() -> None:
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    for spec in SPECS:
        assert spec.name.startswith("bubblewatch_")
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert not any(u in spec.name for u in ("_percent", "_mhz", "_celsius_", "_milli"))


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"
)
def test_promtool_check_metrics_is_clean() -> None:
    proc = subprocess.run(
        ["promtool", "check", "metrics"],
        check=False,
        input=scrape(snapshot()),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "" and proc.stderr.strip() == ""


def test_bubble_energy_integrator_counts_overlap_once() -> None:
    integ = BubbleEnergyIntegrator()
    assert integ.add(60.0, 60.0, 600.0) == 600.0  # first window counts whole
    assert integ.add(70.0, 60.0, 600.0) == 700.0  # 10 s new of a 60 s window
    assert integ.add(70.0, 60.0, 600.0) == 700.0  # same window again adds nothing
    assert integ.add(80.0, 60.0, None) == 700.0  # unmeasurable: no guess
    assert integ.add(500.0, 60.0, 60.0) == 760.0  # a gap counts at most one window


def test_each_scrape_reads_the_latest_snapshot() -> None:
    latest = [ExporterSnapshot()]
    reg = make_registry(lambda: latest[0])
    assert "bubblewatch_pipeline_verdict" not in generate_latest(reg).decode()
    latest[0] = snapshot()
    assert "bubblewatch_pipeline_verdict" in generate_latest(reg).decode()


def test_every_metric_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "daemon.md").read_text()
    missing = [s.name for s in SPECS if f"`{s.name}`" not in doc]
    assert missing == []
