"""The real daemon on simulated GPUs: the verdict follows the scenario, SIGTERM exits 0 quickly.

One daemon process runs pp8-serialized, then (SIGHUP with `simulate:
pp8-async` in its config) the fixed engine. Scrapes over real HTTP must show
the verdict flip, the engine restart noticed (engine_info's depth 0 -> 8),
the change judged against the diagnosis before it (borne out, logged once),
and the trace recorder's file must be a readable trace after SIGTERM.
"""

from __future__ import annotations

import signal
from pathlib import Path

from bubblewatch.sources.trace import read_trace

from ._proc import metric, running, wait_for, write_config

PIPELINE = "testhost/sglang:30000"


def verdict(m: dict[str, float]) -> str | None:
    for v in (
        "serialized",
        "healthy",
        "insufficient_data",
        "launch_bound",
        "imbalanced",
        "straggler",
        "idle",
        "not_pipeline",
    ):
        if metric(m, "bubblewatch_pipeline_verdict", pipeline=PIPELINE, verdict=v) == 1.0:
            return v
    return None


def test_verdict_follows_scenario_switch(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bubblewatch.yml")
    trace = tmp_path / "run.jsonl"
    with running(cfg, "--record", str(trace)) as d:
        status, _ = d.get("/-/healthy")
        assert status == 200
        first = wait_for(
            lambda: verdict(d.metrics()) not in (None, "insufficient_data") and d.metrics(),
            timeout_s=40,
            what="a first verdict",
        )
        assert verdict(first) == "serialized", d.log
        assert (
            metric(
                first,
                "bubblewatch_engine_info",
                pipeline=PIPELINE,
                pp_async_batch_depth="0",
                cuda_graph="false",
            )
            == 1.0
        )
        occ = [
            metric(first, "bubblewatch_stage_occupancy_ratio", pipeline=PIPELINE, stage=str(s))
            for s in range(8)
        ]
        assert all(o is not None for o in occ)
        assert sum(o for o in occ if o is not None) < 1.35  # one stage at a time
        assert d.get("/-/ready")[0] == 200
        assert (metric(first, "bubblewatch_samples_total") or 0) > 8 * 40

        write_config(cfg, simulate="pp8-async")
        d.signal(signal.SIGHUP)
        after = wait_for(
            lambda: (m := d.metrics()) and verdict(m) == "healthy" and m,
            timeout_s=40,
            what="the healthy verdict after the switch",
        )
        assert (
            metric(
                after,
                "bubblewatch_engine_info",
                pipeline=PIPELINE,
                pp_async_batch_depth="8",
                cuda_graph="true",
            )
            == 1.0
        )
        occ_after = sum(
            metric(after, "bubblewatch_stage_occupancy_ratio", pipeline=PIPELINE, stage=str(s))
            or 0.0
            for s in range(8)
        )
        assert occ_after > 2.0  # stages busy together
        assert metric(after, "bubblewatch_config_last_reload_successful") == 1.0
        # The engine restart was noticed, and only parsed settings were logged.
        restarts = d.lines("engine restarted with new settings; analysis starts afresh")
        assert restarts and restarts[0]["pp_async_batch_depth"] == "0->8"
        assert "--model-path" not in d.log
        # A full window after the change, the daemon compares it with the last diagnosis
        # before it: serialized -> healthy, concurrency up, the recommendation borne out.
        judged = wait_for(
            lambda: (
                (m := d.metrics())
                and metric(m, "bubblewatch_pipeline_change_borne_out", pipeline=PIPELINE)
                is not None
                and m
            ),
            timeout_s=20,
            what="the before/after comparison of the engine change",
        )
        assert metric(judged, "bubblewatch_pipeline_change_borne_out", pipeline=PIPELINE) == 1.0
        ratio = metric(judged, "bubblewatch_pipeline_change_concurrency_ratio", pipeline=PIPELINE)
        assert ratio is not None and ratio > 2.0
        changed_at = metric(
            judged, "bubblewatch_pipeline_change_timestamp_seconds", pipeline=PIPELINE
        )
        last_sample = metric(judged, "bubblewatch_last_sample_timestamp_seconds")
        assert changed_at is not None and last_sample is not None
        assert 10.5 <= last_sample - changed_at < 40
        (compared,) = d.lines("engine change compared")
        assert compared["pipeline"] == PIPELINE and compared["borne_out"] == "true"
        assert (compared["verdict_before"], compared["verdict_after"]) == (
            "serialized",
            "healthy",
        )
        assert float(compared["concurrency_after"]) > 2 * float(compared["concurrency_before"])
        assert float(compared["bubble_ratio_after"]) < float(compared["bubble_ratio_before"])
        assert "pp_async_batch_depth=0->8" in compared["changed"]

        rc, took_s = d.stop()
        assert rc == 0, d.log
        assert took_s < 5.0
    rec = read_trace(trace)
    assert len(rec.gpus) == 8
    assert rec.n_samples > 8 * 50
    assert rec.duration_s > 15
    assert any(e.kind == "scenario_change" for e in rec.events)
