"""Training jobs launched as fake processes with their projects' real command lines.

The trees are in tests/fixtures/proc_training (sources of each command line
and config file in generate.py). Each test states the layout and the rank ->
stage -> GPU map that the framework's own process-group numbering gives,
written out by hand, and checks that discovery finds exactly that.
"""

from __future__ import annotations

import json
from pathlib import Path

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.topology.discover import DiscoveryResult, discover_topology

from .conftest import assert_no_secret

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "proc_training"


def discover(name: str) -> DiscoveryResult:
    root = TREES / name
    doc = json.loads((root / "nvml.json").read_text())
    gpus = [GpuInfo.from_dict(g) for g in doc["gpus"]]
    processes = {int(k): list(v) for k, v in doc["processes"].items()}
    return discover_topology(processes, gpus, str(root))


def stage_map(result: DiscoveryResult) -> dict[str, list[list[int]]]:
    return {p.topology.pipeline_id: [list(s) for s in p.topology.stages] for p in result.pipelines}


def test_megatron_torchrun_node_of_a_multi_node_job() -> None:
    r = discover("megatron_mixtral_node2")
    assert r.method == "proc" and not r.warnings
    lay = r.pipelines[0].engine.training  # type: ignore[union-attr]
    assert lay is not None
    assert (lay.framework, lay.launcher, lay.world_size) == ("megatron", "torchrun", 32)
    assert (lay.pp, lay.tp, lay.dp, lay.cp, lay.ep, lay.virtual_stages) == (4, 1, 8, 1, 8, 1)
    assert (lay.micro_batch_size, lay.global_batch_size, lay.micro_batches) == (1, 256, 32)
    assert lay.schedule == "1F1B" and lay.num_layers == 32
    # Megatron order tp-cp-ep-dp-pp: rank = dp + 8 * pp. Node 2 runs ranks 16..23, all
    # in stage 2, one data-parallel replica each; local rank i is on GPU i.
    assert {p.first_stage for p in r.pipelines} == {2}
    assert stage_map(r) == {f"megatron@10.20.0.11:6000/dp{d}": [[d]] for d in range(8)}
    e = r.pipelines[0].engine
    assert e is not None and (e.nnodes, e.node_rank, e.dist_init_addr) == (4, 2, "10.20.0.11:6000")
    assert e.argv[1].endswith("torchrun")


def test_deepspeed_pipeline_module_two_stages() -> None:
    r = discover("deepspeed_pipe2")
    assert r.method == "proc" and not r.warnings
    p0 = r.pipelines[0]
    lay = p0.engine.training  # type: ignore[union-attr]
    assert lay is not None
    assert (lay.framework, lay.launcher, lay.world_size) == ("deepspeed", "deepspeed", 8)
    assert (lay.pp, lay.tp, lay.dp) == (2, 1, 4)
    # ds_config: 256 = 8 (micro) x gas x 4 (dp) -> gas = m = 8.
    assert (lay.micro_batch_size, lay.global_batch_size, lay.micro_batches) == (8, 256, 8)
    assert lay.schedule == "TrainSchedule"
    assert lay.config_file == "ds_config.json"
    # PipeDataParallelTopology [pipe, data]: rank = pipe * 4 + data.
    assert stage_map(r) == {f"deepspeed:pid9100/dp{d}": [[d], [d + 4]] for d in range(4)}
    assert p0.launcher_pid == 9100  # the user's `deepspeed` command, not launcher.launch


def test_torchtitan_pp4_dp2_gpus_in_reverse() -> None:
    r = discover("torchtitan_pp4_dp2")
    assert r.method == "proc" and not r.warnings
    lay = r.pipelines[0].engine.training  # type: ignore[union-attr]
    assert lay is not None
    assert (lay.framework, lay.launcher) == ("torchtitan", "torchrun")
    assert (lay.pp, lay.tp, lay.dp, lay.cp, lay.virtual_stages) == (4, 1, 2, 1, 1)
    # local_batch_size 8 (TOML) / pipeline_parallel_microbatch_size 1 (default).
    assert (lay.micro_batch_size, lay.micro_batches, lay.global_batch_size) == (1, 8, 16)
    assert lay.schedule == "1F1B"  # the override beats the TOML's Interleaved1F1B
    assert lay.sources["parallelism.pipeline_parallel_schedule"] == (
        "--parallelism.pipeline_parallel_schedule"
    )
    # Mesh (pp, dp, cp, tp), tp fastest: rank = 2 * pp + dp. CUDA_VISIBLE_DEVICES=7,...,0
    # puts rank r (local rank r) on host GPU 7 - r, which NVML confirms.
    assert stage_map(r) == {
        "torchtitan@gpu-node-07:45123/dp0": [[7], [5], [3], [1]],
        "torchtitan@gpu-node-07:45123/dp1": [[6], [4], [2], [0]],
    }


def test_plain_ddp_is_data_parallel_without_pipeline() -> None:
    r = discover("ddp_standalone4")
    assert r.method == "proc" and not r.warnings
    [p] = r.pipelines
    lay = p.engine.training  # type: ignore[union-attr]
    assert lay is not None
    assert (lay.framework, lay.world_size, lay.pp, lay.dp) == ("torch", 4, 1, 4)
    assert not lay.is_pipeline and lay.schedule is None and lay.micro_batches is None
    assert [list(s) for s in p.topology.stages] == [[0, 1, 2, 3]]  # one stage: in phase
    assert r.unassigned_gpus == (7,)  # the display server's GPU


def test_no_secret_reaches_results() -> None:
    for name in ("megatron_mixtral_node2", "deepspeed_pipe2", "torchtitan_pp4_dp2"):
        r = discover(name)
        assert_no_secret(json.dumps(r.to_dict()))
    argv = discover("megatron_mixtral_node2").pipelines[0].topology.argv
    assert argv[argv.index("--wandb-api-key") + 1] == "<redacted>"


def _fake_nvml(monkeypatch, name: str) -> str:
    from bubblewatch.cli import topology as cli_topology

    root = TREES / name
    doc = json.loads((root / "nvml.json").read_text())
    inv = cli_topology.NvmlInventory(
        True,
        gpus=[GpuInfo.from_dict(g) for g in doc["gpus"]],
        processes={int(k): list(v) for k, v in doc["processes"].items()},
    )
    monkeypatch.setattr(cli_topology, "nvml_inventory", lambda: inv)
    monkeypatch.setattr(cli_topology, "probe_links", lambda r: (r, {}, None))
    return str(root)


def test_topology_command_shows_the_layout(monkeypatch, capsys) -> None:
    from bubblewatch.cli.main import main

    root = _fake_nvml(monkeypatch, "torchtitan_pp4_dp2")
    assert main(["topology", "--proc-root", root]) == 0
    text = capsys.readouterr().out
    assert "training: torchtitan via torchrun, world 8: pp=4 tp=1 dp=2" in text
    assert "schedule: 1F1B; expected bubble (p-1)/(m+p-1) = 3/(8+3) = 0.273" in text
    assert "stage 0 <- ranks 0 (GPUs 7)" in text and "stage 3 <- ranks 7 (GPUs 0)" in text
    assert main(["topology", "--json", "--proc-root", root]) == 0
    out = capsys.readouterr().out
    assert_no_secret(out)
    training = json.loads(out)["pipelines"][1]["engine"]["training"]
    assert training["gpu_ranks"] == {str(7 - r): r for r in range(8)}
    assert training["expected_bubble"]["bubble_ratio"] == 0.2727
    assert (training["pp_size"], training["micro_batches"]) == (4, 8)


def test_topology_engine_cmdline_takes_a_training_launch(monkeypatch, capsys) -> None:
    from bubblewatch.cli import topology as cli_topology
    from bubblewatch.cli.main import main

    inv = cli_topology.NvmlInventory(False, reason="NVML unavailable: test")
    monkeypatch.setattr(cli_topology, "nvml_inventory", lambda: inv)
    cmd = (
        "CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --nproc_per_node 4 pretrain_gpt.py "
        "--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 "
        "--micro-batch-size 1 --global-batch-size 8"
    )
    assert main(["topology", "--json", "--engine-cmdline", cmd]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "cmdline"
    assert [p["topology"]["stages"] for p in doc["pipelines"]] == [[[4, 5], [6, 7]]]
    assert doc["pipelines"][0]["engine"]["training"]["micro_batches"] == 8
    assert main(["topology", "--engine-cmdline", "python train.py"]) == 2
    assert "nor a training launch" in capsys.readouterr().err


def test_daemon_labels_a_multi_node_job_alike_on_every_node() -> None:
    from bubblewatch.daemon.pipelines.discovery import name_pipelines

    r = discover("megatron_mixtral_node2")
    pipes, _ = name_pipelines([(p.topology, p.engine) for p in r.pipelines], instance="host-c")
    assert pipes[3].id == "megatron@10.20.0.11:6000/dp3"
    assert {p.first_stage for p in pipes} == {2}  # global stage of this node's ranks


def test_without_nvml_processes_the_ranks_are_found_in_the_process_table() -> None:
    root = TREES / "deepspeed_pipe2"
    doc = json.loads((root / "nvml.json").read_text())
    gpus = [GpuInfo.from_dict(g) for g in doc["gpus"]]
    r = discover_topology({}, gpus, str(root))
    assert r.method == "proc-scan"
    # LOCAL_RANK i on the i-th CUDA_VISIBLE_DEVICES entry: the same map NVML confirmed.
    assert stage_map(r) == {f"deepspeed:pid9100/dp{d}": [[d], [d + 4]] for d in range(4)}
    assert any("not confirmed by NVML" in w for w in r.warnings)


def test_megatron_under_srun_interleaved() -> None:
    r = discover("megatron_srun_interleaved")
    assert r.method == "proc" and not r.warnings
    [p] = r.pipelines
    lay = p.engine.training  # type: ignore[union-attr]
    assert lay is not None
    assert (lay.framework, lay.launcher, lay.world_size) == ("megatron", "srun", 96)
    # TP8 PP12, 96 layers, 2 a chunk: 8 a stage, v = 4; m = 12 / (1 x 1).
    assert (lay.pp, lay.tp, lay.dp, lay.virtual_stages, lay.micro_batches) == (12, 8, 1, 4, 12)
    assert lay.schedule == "interleaved-1F1B"
    e = lay.expectation()
    assert e is not None and e.formula == "(p-1)/(v*m+p-1) = 11/(4*12+11) = 0.186"
    # SLURM_PROCID 24..31: the TP group of stage 3.
    assert p.first_stage == 3 and [list(s) for s in p.topology.stages] == [list(range(8))]
    assert p.topology.pipeline_id == "megatron@slurm-4242.0"
