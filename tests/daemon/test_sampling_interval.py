"""The sampling interval in force: a faster default while a training pipeline runs, unless
`sampling.interval` is set; logged, exported, and the ring sized for it."""

from __future__ import annotations

import logging
import shlex
import signal
from pathlib import Path

import pytest
import yaml

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.loop.sampling import TRAINING_INTERVAL_S, apply_sampling, choose_interval
from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.daemon.ring import RingBuffer, capacity_for
from bubblewatch.topology.training import LocalFiles, training_from_cmdline

from ._proc import metric, running, wait_for, write_config

MEGATRON_PP4 = (
    "torchrun --nproc_per_node=4 pretrain_gpt.py --pipeline-model-parallel-size 4 "
    "--num-layers 32 --micro-batch-size 1 --global-batch-size 8"
)


def _pipeline(cmd: str | None) -> Pipeline:
    if cmd is None:
        return Pipeline("host/gpus", None)
    job = training_from_cmdline(shlex.split(cmd), {}, [], files=LocalFiles())
    assert job is not None
    return Pipeline("megatron@host:29500", None, job.engine_config())


def test_training_pipeline_gets_the_faster_default_and_a_set_interval_wins() -> None:
    default = load_config(None, {}, env={})
    assert not default.sampling.interval_set
    train = _pipeline(MEGATRON_PP4)
    ddp = _pipeline("torchrun --nproc_per_node=8 train.py")  # data parallel: no pipeline
    assert ddp.engine is not None and ddp.engine.training is not None
    got = choose_interval(default.sampling, [_pipeline(None), train])
    assert (got.interval_s, got.reason, got.pipeline) == (TRAINING_INTERVAL_S, "training", train.id)
    assert choose_interval(default.sampling, [ddp]).reason == "default"
    assert choose_interval(default.sampling, []).interval_s == 1.0
    for overrides in ({"--sampling.interval": "1s"}, {"--sampling.interval": "500ms"}):
        cfg = load_config(None, overrides, env={})
        assert cfg.sampling.interval_set
        got = choose_interval(cfg.sampling, [train])
        assert (got.interval_s, got.reason) == (cfg.sampling.interval_s, "configured")
    # A history too long for the fast rate (100000 samples per GPU at most) slows it down.
    long = load_config(None, {"--sampling.history": "5h"}, env={})
    assert choose_interval(long.sampling, [train]).interval_s == pytest.approx(0.18)


def test_the_choice_is_applied_logged_once_and_the_ring_resized(caplog) -> None:
    cfg = load_config(None, {}, env={})

    class Source:
        interval = cfg.sampling.interval_s

        def set_interval(self, s: float) -> None:
            self.interval = s

    src, ring = Source(), RingBuffer(capacity_for(cfg.sampling.history_s, 1.0))
    train = [_pipeline(MEGATRON_PP4)]
    with caplog.at_level(logging.INFO, logger="bubblewatch.daemon"):
        choice = apply_sampling(None, cfg, train, src, ring)  # type: ignore[arg-type]
        again = apply_sampling(choice, cfg, train, src, ring)  # type: ignore[arg-type]
    assert again == choice and src.interval == TRAINING_INTERVAL_S
    assert ring.capacity == capacity_for(cfg.sampling.history_s, TRAINING_INTERVAL_S)
    lines = [r for r in caplog.records if r.getMessage() == "sampling interval"]
    assert len(lines) == 1 and lines[0].kv["reason"] == "training"  # type: ignore[attr-defined]
    back = apply_sampling(choice, cfg, [], src, ring)  # type: ignore[arg-type]
    assert (back.reason, src.interval) == ("default", 1.0)
    assert ring.capacity == capacity_for(cfg.sampling.history_s, 1.0)


def _unset_interval(cfg: Path) -> None:
    doc = yaml.safe_load(cfg.read_text())
    del doc["sampling"]["interval"]
    cfg.write_text(yaml.safe_dump(doc))


def test_daemon_samples_a_training_pipeline_faster_until_the_interval_is_set(
    tmp_path: Path,
) -> None:
    cfg = write_config(tmp_path / "bubblewatch.yml", simulate="pp4-1f1b-loader")
    _unset_interval(cfg)
    with running(cfg) as d:
        m = wait_for(
            lambda: (
                (m := d.metrics())
                and metric(m, "bubblewatch_sampling_interval_seconds") is not None
                and m
            ),
            timeout_s=40,
            what="the sampling interval metric",
        )
        assert metric(m, "bubblewatch_sampling_interval_seconds", reason="training") == 0.125
        [line] = [x for x in d.lines("sampling interval") if x.get("reason") == "training"]
        assert line["interval"] == "0.125s" and line["pipeline"], d.log()
        write_config(cfg, simulate="pp4-1f1b-loader")  # sampling.interval: 200ms
        d.signal(signal.SIGHUP)
        m = wait_for(
            lambda: (
                (m := d.metrics())
                and metric(m, "bubblewatch_sampling_interval_seconds", reason="configured") == 0.2
                and m
            ),
            timeout_s=20,
            what="the configured interval after the reload",
        )
        assert metric(m, "bubblewatch_sampling_interval_seconds", reason="training") is None
