"""The training series: a job's layout on `bubblewatch_training_info`, its expected bubble."""

from __future__ import annotations

import shlex

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
