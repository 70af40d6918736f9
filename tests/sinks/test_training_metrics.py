"""The training series: a job's layout on `bubblewatch_training_info`, its expected bubble."""

from __future__ import annotations

import shlex

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sinks.snapshot import ExporterSnapshot, pipeline_state
from bubblewatch.topology.training import LocalFiles, training_from_cmdline


def test_training_info_and_expected_bubble() -> None:
    cmd = (
        "torchrun --nproc_per_node 4 pretrain_gpt.py --pipeline-model-parallel-size 4 "
        "--micro-batch-size 4 --global-batch-size 16 --wandb-api-key sk-live-abcdef123456"
    )
    job = training_from_cmdline(shlex.split(cmd), {}, [], files=LocalFiles())
    assert job is not None
    [(topo, _)] = job.topologies()
    diag = Diagnosis(Verdict.HEALTHY, 0.9, (), (), 60.0, 240, evidence={})
    pipe = pipeline_state("train", diag, topology=topo, engine=job.engine_config())
    text = generate_latest(make_registry(lambda: ExporterSnapshot(pipelines=(pipe,)))).decode()
    assert "sk-live" not in text
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith(("bubblewatch_training", "bubblewatch_pipeline_expected"))
    }
    info = {
        "pipeline": "train", "framework": "megatron", "launcher": "torchrun", "pp_size": "4",
        "tp_size": "1", "dp_size": "1", "cp_size": "1", "ep_size": "1", "virtual_stages": "1",
        "micro_batch_size": "4", "global_batch_size": "16", "micro_batches": "4",
        "schedule": "1F1B",
    }  # fmt: skip
    assert got[("bubblewatch_training_info", tuple(sorted(info.items())))] == 1.0
    assert got[("bubblewatch_pipeline_expected_bubble_ratio", (("pipeline", "train"),))] == (3 / 7)


def _series(text: str, prefix: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith(prefix)
    }


def test_measured_bubble_step_period_and_stage_busy_per_step() -> None:
    from bubblewatch.detect.types import StageStats

    stages = tuple(
        StageStats(i, (i,), 0.56, None, None, None, None, None, None, None,
                   extra={"busy_s_per_step": 0.25 + 0.01 * i})
        for i in range(4)
    )  # fmt: skip
    ev = {"measured_bubble_ratio": 0.44, "step_period_s": 0.45, "bubble_ratio": 0.44}
    diag = Diagnosis(Verdict.HEALTHY, 0.9, (), stages, 60.0, 2400, evidence=ev)
    pipe = pipeline_state("train", diag)
    text = generate_latest(make_registry(lambda: ExporterSnapshot(pipelines=(pipe,)))).decode()
    got = _series(text, "bubblewatch_")
    assert got[("bubblewatch_pipeline_measured_bubble_ratio", (("pipeline", "train"),))] == 0.44
    assert got[("bubblewatch_pipeline_step_period_seconds", (("pipeline", "train"),))] == 0.45
    busy = {
        dict(labels)["stage"]: v
        for (name, labels), v in got.items()
        if name == "bubblewatch_stage_step_busy_seconds"
    }
    assert busy == pytest.approx({"0": 0.25, "1": 0.26, "2": 0.27, "3": 0.28})


def test_no_schedule_no_measured_bubble_series() -> None:
    """Not judged against a schedule: the measured series is absent, not 0 (the alert's input)."""
    diag = Diagnosis(Verdict.HEALTHY, 0.9, (), (), 60.0, 240, evidence={"bubble_ratio": 0.3})
    pipe = pipeline_state("serve", diag)
    text = generate_latest(make_registry(lambda: ExporterSnapshot(pipelines=(pipe,)))).decode()
    assert "bubblewatch_pipeline_bubble_ratio{" in text
    assert "bubblewatch_pipeline_measured_bubble_ratio{" not in text
    assert "bubblewatch_pipeline_step_period_seconds{" not in text
    assert "bubblewatch_stage_step_busy_seconds{" not in text
