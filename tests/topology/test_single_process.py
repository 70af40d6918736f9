"""Single-process multi-GPU jobs from NVML's compute processes (topology/single_process.py)."""

from __future__ import annotations

from bubblewatch.topology.single_process import (
    Placement,
    layer_placement,
    single_process_jobs,
    split_mode,
)

from .test_discover import FakeProc

LLAMA = ["/opt/llama.cpp/build/bin/llama-server", "-m", "m.gguf", "-ngl", "99"]


def test_one_pid_on_three_gpus_is_one_job_named_from_its_command_line():
    proc = FakeProc({40: (1, [*LLAMA, "--tensor-split", "3,3,2"], {}), 41: (1, ["python"], {})})
    jobs = single_process_jobs({0: [40], 1: [40], 2: [40], 3: [41]}, proc)
    assert len(jobs) == 1  # pid 41 holds one GPU: not a split
    job = jobs[0]
    assert (job.pid, job.gpus, job.runtime, job.split) == (40, (0, 1, 2), "llama.cpp", "layer")
    assert job.tensor_split == (3.0, 3.0, 2.0)
    assert job.layer_split


def test_llama_cpp_split_modes():
    assert split_mode(LLAMA) == "layer"  # llama_model_default_params(): LLAMA_SPLIT_MODE_LAYER
    assert split_mode([*LLAMA, "-sm", "row"]) == "row"
    assert split_mode([*LLAMA, "--split-mode=none"]) == "none"
    proc = FakeProc({7: (1, [*LLAMA, "--split-mode", "row"], {})})
    (job,) = single_process_jobs({0: [7], 1: [7]}, proc)
    assert job.split == "row" and not job.layer_split  # rows: the GPUs work together


def test_transformers_from_its_environment_and_ollama_runner():
    hf = FakeProc({5: (1, ["python3", "generate.py"], {"HF_HOME": "/data/hf"})})
    (job,) = single_process_jobs({0: [5], 1: [5]}, hf)
    assert job.runtime == "transformers" and job.layer_split
    ollama = FakeProc({6: (1, ["/usr/bin/ollama", "runner", "--model", "/m"], {})})
    (job,) = single_process_jobs({0: [6], 1: [6]}, ollama)
    assert job.runtime == "ollama" and job.split == "layer"


def test_an_unreadable_process_is_still_a_job_of_unknown_runtime():
    proc = FakeProc({9: (1, ["x"], {})}, denied=[9])
    (job,) = single_process_jobs({0: [9], 1: [9]}, proc)
    assert (job.runtime, job.split, job.gpus) == ("unknown", "unknown", (0, 1))


GIB = 1 << 30


def test_tensor_split_and_memory_recover_a_permuted_layer_order():
    # -ts 1,3,2: device 0 takes 1/6 of the layers, device 1 half, device 2 a third. NVML
    # shows GPU 2 with the least memory, GPU 0 the most: device 0 is GPU 2, 1 is GPU 0,
    # 2 is GPU 1 (as CUDA_VISIBLE_DEVICES=2,0,1 would number them).
    proc = FakeProc({40: (1, [*LLAMA, "-ts", "1,3,2"], {})})
    memory = {0: {40: 31 * GIB}, 1: {40: 21 * GIB}, 2: {40: 11 * GIB}}
    (job,) = single_process_jobs({0: [40], 1: [40], 2: [40]}, proc, memory=memory)
    assert job.memory_b == (31 * GIB, 21 * GIB, 11 * GIB)
    placed = layer_placement(job)
    assert placed == Placement((2, 0, 1), "--tensor-split and memory per GPU", True)


def test_without_distinct_shares_the_device_order_is_only_a_prior():
    memory = {0: {40: 20 * GIB}, 1: {40: 20 * GIB}, 2: {40: 21 * GIB}}
    proc = FakeProc({40: (1, [*LLAMA, "-ts", "1,1,1"], {})})
    (job,) = single_process_jobs({0: [40], 1: [40], 2: [40]}, proc, memory=memory)
    assert layer_placement(job) == Placement((0, 1, 2), "device index", False)
    env = {"CUDA_VISIBLE_DEVICES": "GPU-cc,1,GPU-aa"}
    proc = FakeProc({40: (1, LLAMA, env)})
    uuids = {"GPU-aa11": 0, "GPU-bb22": 1, "GPU-cc33": 2}
    (job,) = single_process_jobs({0: [40], 1: [40], 2: [40]}, proc, memory=memory, uuids=uuids)
    assert job.devices == (2, 1, 0)
    assert layer_placement(job) == Placement((2, 1, 0), "CUDA_VISIBLE_DEVICES", False)


def test_memory_that_contradicts_the_tensor_split_resolves_nothing():
    # -ts 1,3,2 but memory nearly equal: something else holds memory; no order claimed.
    proc = FakeProc({40: (1, [*LLAMA, "-ts", "1,3,2"], {})})
    memory = {0: {40: 20 * GIB}, 1: {40: 19 * GIB}, 2: {40: 18 * GIB}}
    (job,) = single_process_jobs({0: [40], 1: [40], 2: [40]}, proc, memory=memory)
    assert not layer_placement(job).resolved
    unknown = {0: {40: None}, 1: {40: 19 * GIB}, 2: {40: 18 * GIB}}
    (job,) = single_process_jobs({0: [40], 1: [40], 2: [40]}, proc, memory=unknown)
    assert layer_placement(job).source == "device index"
