"""`bubblewatch fleet`: one pipeline across two hosts, joined through a real Prometheus.

The live part runs two real daemons on loopback, each simulating one half of
the same serialized PP8 pipeline (scenario GPUs 0-3 as stages 0-3, GPUs 4-7
as stages 4-7, one pipeline id), and one Prometheus scraping both. Neither
host alone can see that only one of the *eight* stages works at a time; the
fleet view can. The pure join is tested on hand-written label sets first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.daemon.sources.simsource import SimSource
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sources.prometheus_history.fleet import (
    FleetError,
    engine_from_info,
    host_matcher,
    join_pipeline,
    pipelines_from_info,
)

from .daemon_util import BwDaemon, daemon
from .stack_util import PROMETHEUS, get_json, prometheus, wait_until

PIPELINE = "kimi-pp8"


def _info(instance: str, gpu: int, stage: int, pipeline: str = PIPELINE) -> dict[str, str]:
    return {
        "__name__": "bubblewatch_gpu_info",
        "instance": instance,
        "gpu": str(gpu),
        "stage": str(stage),
        "pipeline": pipeline,
        "uuid": f"GPU-{instance}-{gpu}",
    }


# -- the pure join ---------------------------------------------------------------


def test_pipelines_group_gpus_of_several_hosts_by_global_stage():
    info = [_info("b:9842", g, 4 + g) for g in range(4)] + [_info("a:9842", g, g) for g in range(4)]
    info.append(_info("a:9842", 7, 0, pipeline="other"))
    info.append({"instance": "a:9842", "gpu": "6", "pipeline": "", "stage": ""})  # unplaced
    pipes = pipelines_from_info(info)
    assert sorted(pipes) == ["kimi-pp8", "other"]
    p = pipes[PIPELINE]
    assert p.hosts == ("a:9842", "b:9842")
    assert p.stages == tuple(range(8))
    assert p.missing_stages == ()
    assert [(g.host, g.gpu) for g in p.gpus][3:5] == [("a:9842", 3), ("b:9842", 0)]


def test_a_gpu_that_moved_keeps_its_latest_place():
    info = [_info("a:1", 0, 0, pipeline="old"), _info("a:1", 0, 2)]
    pipes = pipelines_from_info(info)
    assert list(pipes) == [PIPELINE]
    assert pipes[PIPELINE].gpus[0].stage == 2


def test_a_missing_host_is_named_with_the_engines_pp_size():
    info = [_info("a:9842", g, g) for g in range(4)]
    engine = [{"pipeline": PIPELINE, "engine": "sglang", "pp_size": "8"}]
    p = pipelines_from_info(info, engine)[PIPELINE]
    assert p.engine_pp_size == 8
    assert p.missing_stages == (4, 5, 6, 7)
    rec = _recording({("a:9842", g): g for g in range(4)})
    with pytest.raises(FleetError, match=r"stage\(s\) 4-7 of the engine's 8 .*stage 0: a:9842"):
        join_pipeline(rec, p)


def test_a_gap_in_the_stages_is_an_error_even_without_engine_info():
    info = [_info("a:1", 0, 0), _info("b:1", 0, 2)]
    p = pipelines_from_info(info)[PIPELINE]
    assert p.missing_stages == (1,)
    with pytest.raises(FleetError, match=r"no host exports stage\(s\) 1 \(seen"):
        join_pipeline(_recording({("a:1", 0): 0, ("b:1", 0): 1}), p)


def test_join_orders_gpus_by_global_stage_and_drops_other_gpus():
    info = [_info("b:1", g, 2 + g) for g in range(2)] + [_info("a:1", g, g) for g in range(2)]
    p = pipelines_from_info(info)[PIPELINE]
    # load_prometheus numbers hosts in name order; host a also has a GPU of no pipeline.
    rec = _recording({("a:1", 0): 0, ("a:1", 1): 1, ("a:1", 2): 2, ("b:1", 0): 3, ("b:1", 1): 4})
    joined = join_pipeline(rec, p)
    assert joined.topology is not None
    assert joined.topology.stages == ((0,), (1,), (3,), (4,))
    assert joined.topology.pipeline_id == PIPELINE
    assert sorted(joined.series) == [0, 1, 3, 4]
    assert [g.index for g in joined.gpus] == [0, 1, 3, 4]
    assert joined.meta["fleet"]["hosts"] == ["a:1", "b:1"]


def test_join_names_a_gpu_whose_metrics_are_missing():
    p = pipelines_from_info([_info("a:1", 0, 0), _info("b:1", 0, 1)])[PIPELINE]
    with pytest.raises(FleetError, match="no telemetry for b:1 GPU 0"):
        join_pipeline(_recording({("a:1", 0): 0}), p)


def test_host_matcher_escapes_regex_and_string_characters():
    p = pipelines_from_info([_info("10.0.0.1:9842", 0, 0), _info('we"ird\\h', 0, 1)])[PIPELINE]
    assert host_matcher(p) == 'instance=~"10\\\\.0\\\\.0\\\\.1:9842|we\\"ird\\\\\\\\h"'
    mixed = pipelines_from_info([{**_info("a:1", 0, 0), "host": "gpu-a"}, _info("b:1", 0, 1)])
    assert mixed[PIPELINE].hosts == ("b:1", "gpu-a")
    assert host_matcher(mixed[PIPELINE]) == ""  # two label kinds: no narrowing


def test_engine_settings_come_back_from_the_exported_labels():
    labels = {
        "pipeline": PIPELINE,
        "engine": "sglang",
        "version": "",
        "pp_size": "8",
        "tp_size": "1",
        "ep_size": "1",
        "cuda_graph": "false",
        "pp_async_batch_depth": "0",
        "pp_max_micro_batch_size": "",
    }
    e = engine_from_info([labels, {**labels, "pipeline": "x", "pp_size": "2"}], PIPELINE)
    assert e is not None
    assert (e.name, e.pp_size, e.cuda_graph, e.pp_async_batch_depth) == ("sglang", 8, False, 0)
    assert e.pp_max_micro_batch_size is None and e.version is None
    assert engine_from_info([labels], "absent") is None


# -- the daemon's side: one host's slice of a simulated pipeline, global stages --


def test_config_reads_the_slice_and_the_first_stage(tmp_path):
    cfg_file = tmp_path / "bw.yml"
    cfg_file.write_text(
        "simulate: pp8-serialized\nsimulate_gpus: [4, 5, 6, 7]\n"
        "topology: {pipeline_id: kimi-pp8, first_stage: 4}\n"
    )
    cfg = load_config(cfg_file, {"--topology.first-stage": "4"}, env={})
    assert cfg.simulate_gpus == (4, 5, 6, 7)
    assert (cfg.topology.pipeline_id, cfg.topology.first_stage) == ("kimi-pp8", 4)
    assert cfg.summary()["simulate_gpus"] == [4, 5, 6, 7]
    for bad, why in (("[4, 4]", "lists a GPU twice"), ("[a]", "list of GPU indices")):
        cfg_file.write_text(f"simulate: pp8-serialized\nsimulate_gpus: {bad}\n")
        with pytest.raises(ConfigError, match=why) as e:
            load_config(cfg_file, env={})
        assert e.value.line == 2 and e.value.field == "simulate_gpus"
    cfg_file.write_text("topology: {first_stage: -1}\n")
    with pytest.raises(ConfigError, match=">= 0"):
        load_config(cfg_file, env={})


def test_sim_source_plays_one_hosts_slice_numbered_as_that_host_would():
    whole = SimSource("pp8-serialized", loop_s=30.0, wall_clock=lambda: 1000.0)
    half = SimSource("pp8-serialized", loop_s=30.0, wall_clock=lambda: 1000.0, gpus=[4, 5, 6, 7])
    assert [g.index for g in half.gpus()] == [0, 1, 2, 3]
    assert [g.uuid for g in half.gpus()] == [g.uuid for g in whole.gpus()[4:]]
    (topo,) = half.topologies()
    assert topo.stages == ((0,), (1,), (2,), (3,))
    for now in (50.0, 50.5):
        a, b = whole.poll(now), half.poll(now)
    assert [s.gpu for s in b] == [0, 1, 2, 3]
    for mine, theirs in zip(b, a[4:], strict=True):
        assert mine.values[Metric.SM_ACTIVE_RATIO] == theirs.values[Metric.SM_ACTIVE_RATIO]
        assert mine.values[Metric.POWER_AVG_W] == theirs.values[Metric.POWER_AVG_W]
    with pytest.raises(ScenarioError, match=r"GPU\(s\) \[8\] not in scenario"):
        SimSource("pp8-serialized", loop_s=30.0, gpus=[7, 8])


def _recording(index: dict[tuple[str, int], int]) -> Recording:
    t = np.arange(20.0)
    gpus = tuple(GpuInfo(index=i, uuid=f"u{i}", name="g", host=h) for (h, _), i in index.items())
    series = {
        i: GpuSeries(i, t, {Metric.SM_ACTIVE_RATIO: np.full(20, 0.1)}) for i in index.values()
    }
    meta = {
        "prometheus": {
            "gpus": [{"index": i, "host": h, "local_index": g} for (h, g), i in index.items()]
        }
    }
    return Recording(gpus=gpus, series=series, meta=meta)


# -- two daemons, one Prometheus ----------------------------------------------------

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (Debian package `prometheus`)"
)
# Seconds of scrapes the fleet view reads: the detector wants >= 10 s and >= 8 steps.
HISTORY_S = 24.0


@dataclass(frozen=True)
class Fleet:
    url: str
    hosts: tuple[BwDaemon, BwDaemon]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (Debian package `prometheus`)")
    work: Path = tmp_path_factory.mktemp("fleet")
    halves = {"host-a": ([0, 1, 2, 3], 0), "host-b": ([4, 5, 6, 7], 4)}
    with (
        daemon(
            work,
            "host-a",
            simulate_gpus=halves["host-a"][0],
            topology={"pipeline_id": PIPELINE, "first_stage": 0},
        ) as a,
        daemon(
            work,
            "host-b",
            simulate_gpus=halves["host-b"][0],
            topology={"pipeline_id": PIPELINE, "first_stage": 4},
        ) as b,
    ):
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "bubblewatch", "static_configs": [{"targets": [a.target, b.target]}]}
            ],
        }
        with prometheus(work, config) as prom:
            t0 = time.monotonic()

            def both_scraped_long_enough() -> bool:
                q = "count(count_over_time(bubblewatch_gpu_sm_active_ratio[1m]) >= 3)"
                res = get_json(f"{prom.url}/api/v1/query?{urlencode({'query': q})}")["data"][
                    "result"
                ]
                return (
                    bool(res)
                    and res[0]["value"][1] == "8"
                    and (time.monotonic() - t0 >= HISTORY_S + 2)
                )

            wait_until(both_scraped_long_enough, 60, "8 GPUs scraped from 2 daemons", 0.5)
            yield Fleet(prom.url, (a, b))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 and "--json" in argv else out), err


@pytest.mark.slow
@needs_prometheus
def test_fleet_lists_the_pipeline_with_both_hosts(fleet, capsys):
    rc, doc, _ = _cli(capsys, "fleet", "--prometheus", fleet.url, "--start=-1m", "--json")
    assert rc == 0
    (p,) = doc["pipelines"]
    assert p["pipeline"] == PIPELINE
    assert p["stages"] == list(range(8)) and p["missing_stages"] == []
    assert p["engine_pp_size"] == 8
    by_host = {h["host"]: h for h in p["per_host"]}
    a, b = (by_host[d.target] for d in fleet.hosts)
    assert (a["stages"], a["gpus"]) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert (b["stages"], b["gpus"]) == ([4, 5, 6, 7], [0, 1, 2, 3])

    rc, text, _ = _cli(capsys, "fleet", "--prometheus", fleet.url, "--start=-1m")
    assert rc == 0
    assert f"{PIPELINE}: 2 host(s), stages 0-7 (engine pp_size 8)" in text
    assert f"{fleet.hosts[1].target}: stages 4-7 on GPU(s) 0,1,2,3; host alone:" in text


@pytest.mark.slow
@needs_prometheus
def test_fleet_finds_the_serialized_pipeline_neither_host_sees(fleet, capsys):
    start = f"--start=now-{HISTORY_S:g}s"
    rc, whole, err = _cli(
        capsys, "fleet", "--prometheus", fleet.url, "--pipeline", PIPELINE, start,
        "--json",
    )  # fmt: skip
    assert rc == 0, err
    assert whole["verdict"] == "serialized", whole["findings"]
    assert whole["topology"]["pp_size"] == 8
    assert whole["topology"]["pipeline_id"] == PIPELINE
    placed = {(g["host"], g["gpu"]): g["stage"] for g in whole["fleet"]["gpu_index"]}
    a, b = (d.target for d in fleet.hosts)
    assert placed == {**{(a, g): g for g in range(4)}, **{(b, g): 4 + g for g in range(4)}}
    assert whole["fleet"]["step_s"] == pytest.approx(2.0, abs=0.5)  # twice the 1 s scrape
    assert whole["engine"]["pp_size"] == 8 and whole["engine"]["cuda_graph"] is False
    fleet_conc = whole["evidence"]["concurrency"]
    # --gpu-model reaches the joined pipeline: the daemons exported their GPUs' names, so
    # those win, nothing else moves, and the other model given is said once.
    rc, named, err = _cli(
        capsys, "fleet", "--prometheus", fleet.url, "--pipeline", PIPELINE, start,
        "--json", "--gpu-model", "NVIDIA A100-SXM4-80GB",
    )  # fmt: skip
    assert rc == 0, err
    assert named["evidence"]["gpu_model_from"] == "recording"
    assert err.count("--gpu-model 'NVIDIA A100-SXM4-80GB' is not used for GPU(s) 0-7") == 1
    assert named["verdict"] == whole["verdict"]
    # One stage of eight at a time: the stages' occupancies sum to about one.
    assert 0.5 < fleet_conc <= 1.35

    # Each host alone, from the same Prometheus: four stages, half the work in view.
    alone = []
    for d in fleet.hosts:
        rc, doc, err = _cli(
            capsys, "analyze", "--prometheus", fleet.url, "--selector", f'instance="{d.target}"',
            "--dialect", "bubblewatch", start, "--step", "2", "--json",
        )  # fmt: skip
        assert rc == 0, err
        assert len(doc["stages"]) == 4
        alone.append(doc["evidence"]["concurrency"])
        # A host can call its half serialized, but never with the whole pipeline's evidence.
        assert not (doc["verdict"] == "serialized" and len(doc["stages"]) == 8)
    assert all(c < 0.6 * fleet_conc for c in alone), (alone, fleet_conc)
    assert sum(alone) == pytest.approx(fleet_conc, abs=0.2)

    # And `fleet` itself refuses one host's half as a whole pipeline.
    rc, _, err = _cli(
        capsys, "fleet", "--prometheus", fleet.url, "--pipeline", PIPELINE, start,
        "--selector", f'instance="{fleet.hosts[0].target}"',
    )  # fmt: skip
    assert rc == 2
    assert "no host exports stage(s) 4-7 of the engine's 8" in err


@pytest.mark.slow
@needs_prometheus
def test_fleet_human_report_and_bad_input(fleet, capsys):
    rc, text, _ = _cli(
        capsys, "fleet", "--prometheus", fleet.url, "--pipeline", PIPELINE,
        f"--start=-{HISTORY_S:g}s", "--color", "never",
    )  # fmt: skip
    assert rc == 0
    assert text.startswith("verdict: serialized")
    assert "PP 8 x TP 1 (topology given)" in text
    assert "--pp-max-micro-batch-size" in text  # the engine settings came through Prometheus
    assert "  stage  7 │" in text
    rc, _, err = _cli(capsys, "fleet", "--prometheus", fleet.url, "--pipeline", "nope")
    assert rc == 2 and f"pipelines seen: {PIPELINE!r}" in err
    rc, _, err = _cli(capsys, "fleet", "--prometheus", fleet.url, "--start=yesterday")
    assert rc == 2 and "cannot read time 'yesterday'" in err


def test_unreachable_prometheus_is_a_clean_error_without_credentials(capsys):
    rc = main(["fleet", "--prometheus", "http://ops:s3cret@127.0.0.1:1", "--timeout", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "http://127.0.0.1:1: cannot reach the server" in err
    assert "s3cret" not in err and "ops" not in err
