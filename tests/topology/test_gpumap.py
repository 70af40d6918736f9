"""Rank -> CUDA ordinal -> host GPU, as each engine places its ranks."""

from __future__ import annotations

import shlex

import pytest

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.gpumap import GpuMapError, map_gpus, rank_device_ordinals, visible_devices

HOST = [GpuInfo(index=i, uuid=f"GPU-{i:02d}aa-bbbb", name="H200") for i in range(8)]


def cfg(cmd, env=None):
    c = parse_engine_cmdline(shlex.split(cmd), env)
    assert c is not None
    return c


def test_sglang_pp8():
    topo = map_gpus(cfg("python -m sglang.launch_server --pp-size 8"), gpus=HOST)
    assert topo.stages == tuple((g,) for g in range(8))


def test_sglang_pp4_tp2_rank_order_is_pp_major():
    topo = map_gpus(cfg("python -m sglang.launch_server --pp-size 4 --tp 2"), gpus=HOST)
    assert topo.stages == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_sglang_base_gpu_id_offsets_every_rank():
    topo = map_gpus(
        cfg("python -m sglang.launch_server --pp-size 2 --tp 2 --base-gpu-id 4"), gpus=HOST
    )
    assert topo.stages == ((4, 5), (6, 7))


def test_sglang_gpu_id_step_multiplies_the_tp_rank_only():
    # SGLang: gpu = base + pp * tp_per_node + tp * step.
    ordinals = rank_device_ordinals(cfg("python -m sglang.launch_server --tp 2 --gpu-id-step 2"))
    assert ordinals == [[0, 2]]


def test_sglang_step_that_collides_is_a_clear_error():
    c = cfg("python -m sglang.launch_server --pp-size 2 --tp 2 --gpu-id-step 2")
    with pytest.raises(GpuMapError, match="places two ranks on one GPU"):
        map_gpus(c, gpus=HOST)


def test_cuda_visible_devices_indices_remap():
    c = cfg(
        "python -m sglang.launch_server --pp-size 2 --tp 2", {"CUDA_VISIBLE_DEVICES": "6,7,2,3"}
    )
    assert map_gpus(c, gpus=HOST).stages == ((6, 7), (2, 3))


def test_cuda_visible_devices_uuid_prefixes_remap():
    env = {"CUDA_VISIBLE_DEVICES": "GPU-05,GPU-04aa-bbbb"}
    assert map_gpus(cfg("vllm serve m -pp 2", env), gpus=HOST).stages == ((5,), (4,))


def test_explicit_visible_list_of_uuids_or_indices():
    c = cfg("vllm serve m -pp 2 -tp 2")
    assert map_gpus(c, ["GPU-03", "GPU-02", 1, 0], HOST).stages == ((3, 2), (1, 0))


def test_uuid_without_inventory_cannot_resolve():
    c = cfg("vllm serve m -pp 2")
    with pytest.raises(GpuMapError, match="names no GPU"):
        map_gpus(c, ["GPU-03", "GPU-02"])


def test_too_few_visible_devices():
    c = cfg("python -m sglang.launch_server --pp-size 4", {"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(
        GpuMapError, match="stage 2 TP rank 0 needs CUDA device 2 but only 2 are visible"
    ):
        map_gpus(c, gpus=HOST)


def test_visible_list_stops_at_first_unknown_entry_like_cuda():
    vis = visible_devices(["1", "9", "2"], HOST)
    assert vis.indices == (1,)
    assert "entry 1 ('9') names no GPU" in vis.warnings[0]


def test_mixed_gpu_models_without_pci_order_warns():
    mixed = [GpuInfo(0, "GPU-a", "H100"), GpuInfo(1, "GPU-b", "L40S")]
    assert any("fastest first" in w for w in visible_devices(None, mixed).warnings)
    assert visible_devices(None, mixed, device_order="PCI_BUS_ID").warnings == ()


def test_vllm_data_parallel_replicas_take_consecutive_blocks():
    c = cfg("vllm serve m -pp 2 -dp 2")
    assert map_gpus(c, gpus=HOST, dp_rank=1).stages == ((2,), (3,))


def test_multi_node_shows_this_nodes_stages_only():
    c = cfg("python -m sglang.launch_server --pp-size 4 --tp 2 --nnodes 2 --node-rank 1")
    assert rank_device_ordinals(c) == [[0, 1], [2, 3]]
    v = cfg("vllm serve m -pp 4 -tp 2 --nnodes 2 --node-rank 1")
    assert rank_device_ordinals(v) == [[0, 1], [2, 3]]


def test_no_inventory_takes_ordinals_as_indices():
    assert map_gpus(cfg("trtllm-serve m --pp_size 2 --tp_size 2")).stages == ((0, 1), (2, 3))


def test_topology_carries_redacted_argv_only():
    topo = map_gpus(cfg("vllm serve m --api-key sk-abcdefghijklmnop1234"), gpus=HOST)
    assert "sk-abcdefghijklmnop1234" not in repr(topo.to_dict())
