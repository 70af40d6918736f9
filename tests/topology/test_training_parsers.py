"""Launcher and framework parsers: flag spellings, config files, derived sizes, errors.

Command lines come from the projects' examples where one exists (named in each
test); expected values follow the frameworks' own arithmetic (cited in the
modules under bubblewatch/topology/training).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bubblewatch.errors import InputError
from bubblewatch.topology.training import (
    LocalFiles,
    ParallelLayout,
    recognise_launcher,
    training_from_cmdline,
)
from bubblewatch.topology.training.layout import LayoutError
from bubblewatch.topology.training.rankenv import rank_env


def job(cmd: str, tmp: Path | None = None, env: dict[str, str] | None = None) -> ParallelLayout:
    files = LocalFiles(str(tmp) if tmp else None)
    j = training_from_cmdline(shlex.split(cmd), env or {}, [], files=files)
    assert j is not None
    return j.layout


@pytest.mark.parametrize(
    ("cmd", "name", "nproc", "nnodes", "node", "master"),
    [
        ("torchrun --nproc_per_node 8 --nnodes 2 --node_rank 1 --master_addr h --master_port 6000 "
         "s.py", "torchrun", 8, 2, 1, ("h", 6000)),
        ("python -m torch.distributed.run --nproc-per-node=4 --nnodes=1:4 --rdzv-backend=c10d "
         "--rdzv-endpoint=head:29400 s.py", "torchrun", 4, 4, 0, ("head", 29400)),
        ("/usr/bin/python3 /usr/local/bin/torchrun --standalone --nproc_per_node=2 s.py",
         "torchrun", 2, 1, 0, ("localhost", None)),
        ("deepspeed --num_gpus 4 --num_nodes 2 --master_addr m train.py --deepspeed",
         "deepspeed", 4, 2, None, ("m", 29500)),
        ("python -u -m deepspeed.launcher.launch --world_info=e30= --master_addr=127.0.0.1 "
         "--master_port=29500 train.py", "deepspeed", None, None, None, ("127.0.0.1", 29500)),
        ("accelerate launch --num-processes 8 --num_machines 2 --machine_rank 1 "
         "--main_process_ip 10.0.0.2 --multi_gpu train.py", "accelerate", 4, 2, 1,
         ("10.0.0.2", None)),
        ("srun -N2 --ntasks-per-node=8 -l python -u pretrain_gpt.py", "srun", 8, 2, None,
         (None, None)),
    ],
)  # fmt: skip
def test_launchers(cmd, name, nproc, nnodes, node, master) -> None:
    info = recognise_launcher(shlex.split(cmd))
    assert info is not None
    assert (info.name, info.nproc_per_node, info.nnodes, info.node_rank) == (
        name,
        nproc,
        nnodes,
        node,
    )
    assert (info.master_addr, info.master_port) == master
    assert info.program is not None and info.program.name in ("s.py", "train.py", "pretrain_gpt.py")


def test_torchrun_module_program_and_not_a_launcher() -> None:
    info = recognise_launcher(shlex.split("torchrun --nproc_per_node=8 -m torchtitan.train --x 1"))
    assert info is not None and info.program is not None
    assert (info.program.module, info.program.args) == ("torchtitan.train", ("--x", "1"))
    assert recognise_launcher(["python", "-m", "sglang.launch_server"]) is None
    assert recognise_launcher(["vllm", "serve", "m"]) is None


def test_megatron_interleaved_from_sc21_figure_12() -> None:
    # examples/academic_paper_scripts/sc21/run_figure_12.sh (INTERLEAVED=YES, GBS=12):
    # TP8 PP12 MBS1 NLS96 on 12 nodes x 8 tasks; 96/12 = 8 layers a stage, 2 a chunk.
    lay = job(
        "srun -N12 --ntasks-per-node=8 python -u pretrain_gpt.py --activations-checkpoint-method "
        "uniform --num-layers-per-virtual-pipeline-stage 2 --tensor-model-parallel-size 8 "
        "--pipeline-model-parallel-size 12 --micro-batch-size 1 --global-batch-size 12 "
        "--num-layers 96 --hidden-size 12288"
    )
    assert (lay.framework, lay.launcher, lay.world_size) == ("megatron", "srun", 96)
    assert (lay.pp, lay.tp, lay.dp, lay.virtual_stages, lay.micro_batches) == (12, 8, 1, 4, 12)
    assert lay.schedule == "interleaved-1F1B"


def test_megatron_tp_pp_dp_mapping_and_uneven_stages() -> None:
    base = (
        "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 64 "
        "--num-layers 30 --decoder-first-pipeline-num-layers 14 "
    )
    lay = job(base)
    # default tp-cp-ep-dp-pp: rank = tp + 2 * (dp + 2 * pp)
    assert [lay.stage_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert (lay.dp, lay.micro_batches, lay.first_stage_layers) == (2, 16, 14)
    mapped = job(base + "--use-tp-pp-dp-mapping")
    # tp-cp-ep-pp-dp: rank = tp + 2 * (pp + 2 * dp)
    assert [mapped.stage_of(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    v = job(base.replace("--decoder-first-pipeline-num-layers 14", "") + "--num-virtual-stages-"
            "per-pipeline-rank 3")  # fmt: skip
    assert v.virtual_stages == 3


def test_megatron_bad_values_name_the_flag() -> None:
    with pytest.raises(InputError, match="--pipeline-model-parallel-size expects an integer"):
        job("torchrun --nproc_per_node 8 pretrain_gpt.py --pipeline-model-parallel-size x")
    with pytest.raises(InputError, match="not divisible by tp x pp x cp = 3"):
        job("torchrun --nproc_per_node 8 pretrain_gpt.py --pipeline-model-parallel-size 3")
    with pytest.raises(InputError, match="not a multiple of 4"):
        job(
            "torchrun --nproc_per_node 4 pretrain_gpt.py --pipeline-model-parallel-size 2 "
            "--num-layers 12 --num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 1"
        )


def test_deepspeed_batch_resolution_and_megatron_deepspeed(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text('{"train_batch_size": 64, "gradient_accumulation_steps": 4}')
    lay = job("deepspeed --num_gpus 8 train.py --deepspeed --deepspeed_config ds.json "
              "--pipeline-parallel-size 4", tmp_path)  # fmt: skip
    # dp = 8 / 4 = 2; micro = 64 / 2 / 4 = 8.
    assert (lay.pp, lay.dp, lay.micro_batch_size, lay.micro_batches) == (4, 2, 8, 4)
    (tmp_path / "auto.json").write_text('{"train_micro_batch_size_per_gpu": "auto"}')
    mds = job(
        "deepspeed --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 --micro-batch-size 4 --global-batch-size 64 "
        "--deepspeed --deepspeed_config auto.json",
        tmp_path,
    )
    assert (mds.framework, mds.tp, mds.pp, mds.dp, mds.micro_batches) == ("deepspeed", 2, 2, 2, 8)
    assert mds.order == ("tp", "dp", "pp")


def test_deepspeed_without_pipeline_flag_or_config_is_data_parallel(tmp_path: Path) -> None:
    lay = job("deepspeed --num_gpus 4 train.py --deepspeed_config missing.json", tmp_path)
    assert (lay.pp, lay.dp, lay.micro_batches) == (1, 4, None)
    assert any("no such file" in n for n in lay.notes)
    assert any("set in code" in n for n in lay.notes)


def test_torchtitan_zbv_and_spellings(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        "[training]\nlocal_batch_size = 16\n[parallelism]\ntensor_parallel_degree = 2\n"
    )
    lay = job(
        "torchrun --nproc_per_node=8 -m torchtitan.train --job.config_file c.toml "
        "--parallelism.pipeline-parallel-degree 2 --parallelism.pipeline_parallel_schedule "
        "zbvzerobubble --parallelism.pipeline_parallel_microbatch_size=2",
        tmp_path,
    )
    assert (lay.pp, lay.tp, lay.dp, lay.virtual_stages) == (2, 2, 2, 2)
    assert (lay.schedule, lay.micro_batches, lay.global_batch_size) == ("ZBVZeroBubble", 8, 32)
    assert [lay.stage_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(InputError, match="is not the world size 8"):
        job(
            "torchrun --nproc_per_node=8 -m torchtitan.train --parallelism.pipeline_parallel_"
            "degree 3 --parallelism.data_parallel_shard_degree 2"
        )


def test_torchtitan_bad_toml_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[training\n")
    lay = job(
        "torchrun --nproc_per_node=2 -m torchtitan.train --job.config_file bad.toml", tmp_path
    )
    assert (lay.pp, lay.dp) == (1, 2)
    assert any("bad.toml: not TOML" in n for n in lay.notes)


def test_nemo_hydra_config_and_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "examples" / "conf"
    conf.mkdir(parents=True)
    (conf / "megatron_gpt_config.yaml").write_text(
        "trainer: {devices: 1, num_nodes: 1}\nmodel:\n  micro_batch_size: 4\n"
        "  global_batch_size: 8\n  tensor_model_parallel_size: 1\n"
        "  pipeline_model_parallel_size: 1\n  num_layers: 24\n"
        "  virtual_pipeline_model_parallel_size: ${multiply:2, 1}\n"
    )
    lay = job(
        "python examples/megatron_gpt_pretraining.py trainer.devices=8 trainer.num_nodes=1 "
        "model.pipeline_model_parallel_size=4 ++model.virtual_pipeline_model_parallel_size=3 "
        "model.global_batch_size=64",
        tmp_path,
    )
    assert (lay.framework, lay.launcher, lay.world_size) == ("nemo", "none", 8)
    assert (lay.pp, lay.tp, lay.dp, lay.virtual_stages) == (4, 1, 2, 3)
    assert (lay.micro_batch_size, lay.micro_batches, lay.num_layers) == (4, 8, 24)
    assert lay.config_file is not None and lay.config_file.endswith("megatron_gpt_config.yaml")
    nemo2 = job(
        "torchrun --nproc_per_node 8 pretrain.py trainer.strategy.pipeline_model_parallel_size=2 "
        "trainer.strategy.tensor_model_parallel_size=2 data.micro_batch_size=1 "
        "data.global_batch_size=32"
    )
    assert (nemo2.pp, nemo2.tp, nemo2.dp, nemo2.micro_batches) == (2, 2, 2, 16)


def test_nemo_malformed_hydra_config_names_its_line(tmp_path: Path) -> None:
    conf = tmp_path / "examples" / "conf"
    conf.mkdir(parents=True)
    (conf / "megatron_gpt_config.yaml").write_text(
        "trainer: {devices: 1}\nmodel:\n  num_layers: 24\n  num_layers: 12\n"
    )
    lay = job(
        "python examples/megatron_gpt_pretraining.py trainer.devices=8 "
        "model.pipeline_model_parallel_size=2",
        tmp_path,
    )
    assert (lay.pp, lay.num_layers) == (2, None)  # the overrides only
    assert any(
        n.endswith("megatron_gpt_config.yaml:4: field 'model.num_layers': duplicate key "
                   "'num_layers'; overrides only")
        for n in lay.notes
    ), lay.notes  # fmt: skip
    with pytest.raises(InputError, match="nests deeper than 64"):
        job(
            "python examples/megatron_gpt_pretraining.py trainer.devices=8 "
            "model.pipeline_model_parallel_size=" + "[" * 99,
            tmp_path,
        )


def test_plain_python_without_rank_env_is_not_a_job() -> None:
    assert training_from_cmdline(["python", "train.py"], {}, [], files=LocalFiles()) is None
    lay = job("python train.py", env={"WORLD_SIZE": "2", "RANK": "0"})
    assert (lay.framework, lay.dp) == ("torch", 2)


def test_rank_env_sources_and_problems() -> None:
    e = rank_env({"SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16",
                  "SLURM_NODEID": "1", "SLURM_JOB_ID": "77", "MASTER_PORT": "x"})  # fmt: skip
    assert (e.rank, e.local_rank, e.world_size, e.node_rank, e.run_id) == (
        9,
        1,
        16,
        1,
        "slurm-77.0",
    )
    assert e.master_port is None and e.problems == ("MASTER_PORT='x' is not an integer",)


def test_layout_coords_and_round_trip() -> None:
    lay = ParallelLayout("torchtitan", "torchrun", 16, pp=2, tp=2, dp=2, cp=2, schedule="1F1B")
    # tp fastest, then cp, dp, pp.
    assert lay.coords(13) == {"tp": 1, "cp": 0, "dp": 1, "pp": 1}
    assert ParallelLayout.from_dict(lay.to_dict()) == lay
    with pytest.raises(LayoutError, match="is not the world size"):
        ParallelLayout("torch", "x", 8, pp=3)
    with pytest.raises(LayoutError, match="outside the world"):
        lay.coords(16)
