"""Training jobs discovered from fake processes, through the detector and the shipped rules."""

from __future__ import annotations

import json
from pathlib import Path

from bubblewatch.detect import diagnose
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.rules import build_facts, recommend
from bubblewatch.topology.discover import DiscoveryResult, discover_topology

from .synth import make_recording

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "proc_training"


def discover(name: str) -> DiscoveryResult:
    root = TREES / name
    doc = json.loads((root / "nvml.json").read_text())
    gpus = [GpuInfo.from_dict(g) for g in doc["gpus"]]
    return discover_topology({int(k): v for k, v in doc["processes"].items()}, gpus, str(root))


def test_ddp_job_raises_nothing() -> None:
    [p] = discover("ddp_standalone4").pipelines
    # Four data-parallel ranks computing in phase, as their discovered topology says.
    rec = make_recording("healthy", pp=1, tp=4, in_phase=True, running=None, queued=None)
    diag = diagnose(rec, p.topology)
    recs = recommend(diag, p.engine, p.topology, gpus=rec.gpus)
    assert diag.verdict.value == "not_pipeline"
    assert recs == []
    facts = build_facts(diag, p.engine, p.topology)
    assert facts.get("training.known") is True and facts.get("training.pipeline") is False


def test_torchtitan_job_gets_its_own_flags() -> None:
    p = discover("torchtitan_pp4_dp2").pipelines[0]
    rec = make_recording("healthy", pp=4, tp=1, k=4, running=None, queued=None)
    diag = diagnose(rec, None)
    recs = {r.rule: r for r in recommend(diag, p.engine, None)}
    assert {
        "TrainingMicroBatchesTorchtitan",
        "TrainingInterleaveTorchtitan",
        "TrainingZeroBubbleTorchtitan",
    } <= set(recs)
    cmd = recs["TrainingInterleaveTorchtitan"].command
    # The schedule flag on the command line is changed in place.
    assert cmd is not None and "--parallelism.pipeline_parallel_schedule Interleaved1F1B" in cmd
    assert "pipeline_parallel_schedule 1F1B" not in cmd
    assert "HF_TOKEN" not in cmd


def test_deepspeed_fixture_bubble_is_below_the_micro_batch_threshold() -> None:
    p = discover("deepspeed_pipe2").pipelines[0]
    rec = make_recording("healthy", pp=2, tp=1, k=2, running=None, queued=None)
    facts = build_facts(diagnose(rec, None), p.engine, None)
    # p=2, m=8: (2-1)/(8+2-1) = 1/9.
    assert abs(facts.get("training.expected_bubble_ratio") - 1 / 9) < 1e-12
    assert facts.get("training.expected_formula") == "(p-1)/(m+p-1) = 1/(8+1) = 0.111"
    assert "TrainingMicroBatchesDeepSpeed" not in {
        r.rule for r in recommend(diagnose(rec, None), p.engine, None)
    }


def test_recorded_training_layout_reaches_analyze(tmp_path, capsys) -> None:
    """A trace whose header carries the job's layout (as `record` writes it) gets its rules."""
    import shlex
    from dataclasses import replace

    from bubblewatch.cli.main import main
    from bubblewatch.sources.trace import write_trace
    from bubblewatch.topology.training import LocalFiles, training_from_cmdline

    cmd = (
        "torchrun --nproc_per_node 4 pretrain_gpt.py --pipeline-model-parallel-size 4 "
        "--num-layers 32 --micro-batch-size 4 --global-batch-size 16 --wandb-api-key sk-secret"
    )
    job = training_from_cmdline(shlex.split(cmd), {}, [], files=LocalFiles(str(tmp_path)))
    assert job is not None
    [(topo, _)] = job.topologies()
    rec = make_recording("healthy", pp=4, tp=1, k=4, running=None, queued=None)
    rec = replace(rec, topology=topo, meta={"training": job.layout.to_dict()})
    path = tmp_path / "t.jsonl"
    write_trace(path, rec)
    assert main(["analyze", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert "sk-secret" not in out
    doc = json.loads(out)
    assert doc["engine"]["training"]["micro_batches"] == 4
    rules = {r["rule"]: r for r in doc["recommendations"]}
    assert {"TrainingMicroBatchesMegatron", "TrainingInterleaveMegatron"} <= set(rules)
    assert "--micro-batch-size 1" in rules["TrainingMicroBatchesMegatron"]["command"]


def test_training_rules_load_from_the_checkout_and_the_package_copy() -> None:
    import bubblewatch.rules
    from bubblewatch.rules.loader import load_rules

    pkg = Path(bubblewatch.rules.__file__).parent / "shipped"
    training = {"TrainingMicroBatchesMegatron", "TrainingInterleaveTorchtitan"}
    assert training <= set(load_rules([pkg]).names)
    assert training <= set(load_rules().names)
