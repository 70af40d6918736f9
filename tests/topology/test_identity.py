"""A multi-node engine's pipeline id and global first stage, from each node's own flags."""

from __future__ import annotations

import json
import shlex

import pytest

from bubblewatch.cli import topology as cli_topology
from bubblewatch.cli.main import main
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.discover import discover_from_cmdline
from bubblewatch.topology.identity import node_identity

HOST = [GpuInfo(index=i, uuid=f"GPU-{i:02d}aa-bbbb", name="H200") for i in range(8)]

# One SGLang PP8 engine over two nodes of 4 GPUs (SGLang's multi-node launch).
SGLANG_NODE = (
    "python -m sglang.launch_server --model-path {model} --pp-size 8 --nnodes 2 "
    "--node-rank {rank} --dist-init-addr 10.0.0.1:5000 --port 30000 {extra}"
)


def cfg(cmd: str):
    c = parse_engine_cmdline(shlex.split(cmd))
    assert c is not None
    return c


def sglang_node(rank: int, *, model: str = "/models/Kimi-K2", extra: str = ""):
    return cfg(SGLANG_NODE.format(model=model, rank=rank, extra=extra))


def test_two_nodes_of_one_sglang_pp8_engine_share_the_id_and_number_stages_globally():
    a = node_identity(sglang_node(0, extra="--host 0.0.0.0 --api-key sk-abcdefghijklmnop1234"))
    # Node 1 mounts the weights elsewhere: the model's name, not its path, is in the id.
    b = node_identity(sglang_node(1, model="/mnt/weights/Kimi-K2/"))
    assert a is not None and b is not None
    assert a.pipeline_id == b.pipeline_id == "sglang@10.0.0.1:5000/Kimi-K2"
    assert (a.first_stage, b.first_stage) == (0, 4)
    assert (b.node_rank, b.nnodes) == (1, 2)
    assert "sk-abcdefghijklmnop" not in repr(a)


def test_discovery_names_each_nodes_pipeline_alike_and_says_where_its_stages_start():
    results = [
        discover_from_cmdline(
            shlex.split(SGLANG_NODE.format(model="m", rank=r, extra="")), {}, HOST
        )
        for r in (0, 1)
    ]
    pipes = [r.pipelines[0] for r in results]
    assert [p.topology.pipeline_id for p in pipes] == ["sglang@10.0.0.1:5000/m"] * 2
    assert [p.first_stage for p in pipes] == [0, 4]
    assert [p.to_dict()["first_stage"] for p in pipes] == [0, 4]
    # Each node places its four stages on its own GPUs 0-3.
    assert pipes[1].topology.stages == ((0,), (1,), (2,), (3,))
    assert any("globally they start at stage 4" in w for w in results[1].warnings)


def test_other_engines_or_the_old_flag_spelling():
    # Another engine (another rendezvous address or model) gets another id.
    other = node_identity(
        cfg(
            "python -m sglang.launch_server --model-path m --pp-size 8 --nnodes 2 "
            "--node-rank 0 --dist-init-addr 10.0.0.9:5000"
        )
    )
    same_addr = node_identity(sglang_node(0, model="org/Other-Model"))
    this = node_identity(sglang_node(0))
    assert other is not None and same_addr is not None and this is not None
    assert len({other.pipeline_id, same_addr.pipeline_id, this.pipeline_id}) == 3
    # A hub id keeps its organisation; characters a label should not carry become "_".
    assert same_addr.pipeline_id == "sglang@10.0.0.1:5000/org/Other-Model"
    odd = node_identity(sglang_node(0, model='"my model+v2"'))
    assert odd is not None and odd.pipeline_id == "sglang@10.0.0.1:5000/my_model_v2"
    legacy = node_identity(
        cfg(
            "python -m sglang.launch_server --model-path /models/Kimi-K2 --pp-size 8 "
            "--nnodes 2 --node-rank 1 --nccl-init-addr 10.0.0.1:5000"
        )
    )
    assert legacy == node_identity(sglang_node(1))


@pytest.mark.parametrize(
    ("flags", "first_stages"),
    [
        # One stage per node.
        ("--pp-size 4 --nnodes 4", [0, 1, 2, 3]),
        # More nodes than stages: each TP group spans two nodes (SGLang: nnodes_per_pp_rank).
        ("--pp-size 2 --tp 16 --nnodes 4", [0, 0, 1, 1]),
        ("--pp-size 8 --tp 2 --nnodes 2", [0, 4]),
    ],
)
def test_sglang_first_stage_follows_its_rank_placement(flags, first_stages):
    got = []
    for rank in range(len(first_stages)):
        node = node_identity(
            cfg(f"python -m sglang.launch_server {flags} --node-rank {rank} --dist-init-addr h:1")
        )
        assert node is not None
        got.append(node.first_stage)
    assert got == first_stages


def test_vllm_multiprocessing_multi_node_uses_master_addr_and_rank_order():
    long = node_identity(
        cfg("vllm serve org/m -pp 4 -tp 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1")
    )
    short = node_identity(
        cfg("vllm serve org/m -pp 4 -tp 2 -n 2 -r 1 --master-addr 10.0.0.1 --master-port 29501")
    )
    assert long is not None and long == short
    assert (long.pipeline_id, long.first_stage) == ("vllm@10.0.0.1:29501/org/m", 2)
    # A TP group larger than a node: both nodes hold stage 0 of a one-stage pipeline.
    wide = node_identity(cfg("vllm serve m -tp 16 --nnodes 2 --node-rank 1 --master-addr h"))
    assert wide is not None and wide.first_stage == 0


def test_single_node_engine_has_no_node_identity_and_keeps_its_port_id():
    c = cfg("python -m sglang.launch_server --model-path m --pp-size 8 --port 30001")
    assert node_identity(c) is None
    result = discover_from_cmdline(shlex.split(" ".join(c.argv)), {}, HOST)
    assert result.pipelines[0].topology.pipeline_id == "sglang:30001"
    assert result.pipelines[0].first_stage == 0
    # A rendezvous address alone does not make an engine multi-node.
    assert node_identity(cfg("python -m sglang.launch_server --dist-init-addr h:1")) is None


def test_multi_node_without_a_rendezvous_address_still_numbers_stages_but_asks_for_an_id():
    argv = shlex.split("python -m sglang.launch_server --pp-size 8 --nnodes 2 --node-rank 1")
    node = node_identity(cfg(" ".join(argv)))
    assert node is not None and (node.pipeline_id, node.first_stage) == (None, 4)
    assert "no pipeline id" in node.describe()
    result = discover_from_cmdline(argv, {}, HOST)
    assert result.pipelines[0].topology.pipeline_id == "sglang:30000"
    assert result.pipelines[0].first_stage == 4
    assert any("--dist-init-addr" in w and "topology.pipeline_id" in w for w in result.warnings)


def test_topology_command_shows_the_global_stages_of_this_node(monkeypatch, capsys):
    inv = cli_topology.NvmlInventory(False, reason="NVML unavailable: no driver")
    monkeypatch.setattr(cli_topology, "nvml_inventory", lambda: inv)
    cmd = SGLANG_NODE.format(model="m", rank=1, extra="")
    assert main(["topology", "--engine-cmdline", cmd]) == 0
    out = capsys.readouterr().out
    assert "pipeline sglang@10.0.0.1:5000/m: sglang, PP4" in out
    assert "node:  1 of 2; these are stages 4-7 of the engine's 8" in out
    assert main(["topology", "--json", "--engine-cmdline", cmd]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipelines"][0]["first_stage"] == 4
    assert doc["pipelines"][0]["engine"]["dist_init_addr"] == "10.0.0.1:5000"
