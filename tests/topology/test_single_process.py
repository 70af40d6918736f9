"""Single-process multi-GPU jobs from NVML's compute processes (topology/single_process.py)."""

from __future__ import annotations

from bubblewatch.topology.single_process import single_process_jobs, split_mode

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
