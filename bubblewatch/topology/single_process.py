"""One process holding several GPUs: a model split over them inside one process.

Serving engines (SGLang, vLLM) and torchrun jobs run one process per GPU;
Transformers/Accelerate `device_map="auto"`, llama.cpp and Ollama's runner
load one model over several GPUs from a single process, by default as
consecutive layer blocks (llama.cpp: `llama_model_default_params()` sets
`split_mode = LLAMA_SPLIT_MODE_LAYER`; `--split-mode row` splits rows
instead, `none` uses `--main-gpu` only). NVML's compute processes per GPU
give pid -> GPUs; a pid on two or more GPUs is such a job. Its stages are
its GPUs in order (layer blocks are placed by device index; which GPU runs
first the telemetry confirms, detect/turns.py). Pure: the /proc reader is
passed in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bubblewatch.topology.procfs import ProcReader, ProcUnavailable

__all__ = ["SingleProcessJob", "single_process_jobs", "split_mode"]

LAYER, ROW, NONE = "layer", "row", "none"
_LLAMA_CPP = ("llama-server", "llama-cli", "llama-run")
_SPLIT_FLAGS = ("--split-mode", "-sm")


@dataclass(frozen=True)
class SingleProcessJob:
    """A process and the GPUs it holds, what runs in it and how it splits the model."""

    pid: int
    gpus: tuple[int, ...]
    runtime: str  # "llama.cpp", "ollama", "transformers", "python", "unknown"
    split: str  # "layer", "row", "none" (llama.cpp's --split-mode) or "unknown"
    tensor_split: tuple[float, ...] = ()  # llama.cpp --tensor-split proportions, per GPU

    @property
    def layer_split(self) -> bool:
        """Whether its GPUs take turns per token (a layer split, or a split not known)."""
        return self.split in (LAYER, "unknown")


def split_mode(argv: Sequence[str]) -> str:
    """llama.cpp's `--split-mode`/`-sm` value (`layer` when absent: its default)."""
    for i, a in enumerate(argv):
        for flag in _SPLIT_FLAGS:
            if a == flag and i + 1 < len(argv):
                return argv[i + 1].lower()
            if a.startswith(flag + "="):
                return a.split("=", 1)[1].lower()
    return LAYER


def _tensor_split(argv: Sequence[str]) -> tuple[float, ...]:
    for i, a in enumerate(argv):
        value = None
        if a in ("--tensor-split", "-ts") and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--tensor-split="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return tuple(float(x) for x in value.replace("/", ",").split(",") if x)
            except ValueError:
                return ()
    return ()


def _runtime(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, str]:
    """(runtime, split) from the command line and environment."""
    if not argv:
        return "unknown", "unknown"
    exe = os.path.basename(argv[0])
    if exe in _LLAMA_CPP or exe.startswith("llama-"):
        return "llama.cpp", split_mode(argv)
    if exe.startswith("ollama") or "runner" in argv[1:2]:
        return "ollama", split_mode(argv)
    if exe.startswith("python"):
        text = " ".join(argv).lower()
        hf = "transformers" in text or "accelerate" in text or "device_map" in text
        hf = hf or any(k.startswith(("HF_", "TRANSFORMERS_", "ACCELERATE_")) for k in env)
        return ("transformers" if hf else "python"), "unknown"
    return "unknown", "unknown"


def single_process_jobs(
    processes: Mapping[int, Sequence[int]], reader: ProcReader
) -> list[SingleProcessJob]:
    """Processes that NVML lists on two or more GPUs, each with its runtime and split."""
    held: dict[int, set[int]] = {}
    for gpu, pids in processes.items():
        for pid in pids:
            held.setdefault(pid, set()).add(gpu)
    out: list[SingleProcessJob] = []
    for pid, gpus in sorted(held.items()):
        if len(gpus) < 2:
            continue
        try:
            argv = reader.cmdline(pid)
        except ProcUnavailable:
            argv = []
        try:
            env = reader.environ(pid)
        except ProcUnavailable:
            env = {}
        runtime, split = _runtime(argv, env)
        out.append(SingleProcessJob(pid, tuple(sorted(gpus)), runtime, split, _tensor_split(argv)))
    return out
