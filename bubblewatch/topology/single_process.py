"""One process holding several GPUs: a model split over them inside one process.

Serving engines (SGLang, vLLM) and torchrun jobs run one process per GPU;
Transformers/Accelerate `device_map="auto"`, llama.cpp and Ollama's runner
load one model over several GPUs from a single process, by default as
consecutive layer blocks (llama.cpp: `llama_model_default_params()` sets
`split_mode = LLAMA_SPLIT_MODE_LAYER`; `--split-mode row` splits rows
instead, `none` uses `--main-gpu` only). NVML's compute processes per GPU
give pid -> GPUs; a pid on two or more GPUs is such a job. Pure: the /proc
reader is passed in.

Where the layers are (`layer_placement`): llama.cpp gives device i the i-th
contiguous block of layers, its size in proportion to `--tensor-split` entry i
(src/llama-model.cpp, `load_tensors`: the device of layer il is the first
whose cumulative split exceeds il / n_layers; without `--tensor-split`, in
proportion to each device's free memory); Accelerate's `device_map="auto"`
fills devices in index order. A device is a CUDA device: with
CUDA_VISIBLE_DEVICES="2,0,1" device 0 is the GPU NVML calls 2. So the first
layers are on the first visible device, and where `--tensor-split` gives
distinct proportions, the memory the process holds on each GPU (NVML) says
which GPU took which block, whatever the numbering: that order is
`resolved`. Otherwise the device order is only a prior, and the order of the
turns in the telemetry decides (detect/turns.py).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bubblewatch.topology.procfs import ProcReader, ProcUnavailable

__all__ = [
    "Placement",
    "SingleProcessJob",
    "layer_placement",
    "single_process_jobs",
    "split_mode",
]

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
    tensor_split: tuple[float, ...] = ()  # llama.cpp --tensor-split proportions, per device
    memory_b: tuple[int | None, ...] = ()  # memory it holds on each of `gpus` (NVML), if known
    devices: tuple[int, ...] = ()  # GPU index of CUDA device 0, 1, ... (CUDA_VISIBLE_DEVICES)

    @property
    def layer_split(self) -> bool:
        """Whether its GPUs take turns per token (a layer split, or a split not known)."""
        return self.split in (LAYER, "unknown")


@dataclass(frozen=True)
class Placement:
    """The job's GPUs in the order of their layer blocks, and how that order is known."""

    order: tuple[int, ...]
    source: str  # "--tensor-split and memory per GPU", "CUDA_VISIBLE_DEVICES", "device index"
    resolved: bool  # from where the weights are (not a device-order prior)


# Tensor-split shares this far apart tell their GPUs apart by memory; memory shares may
# stray this far from them (KV cache and compute buffers follow the layers; the output
# layer, the CUDA context and the host's other buffers do not).
_MIN_SHARE_GAP = 0.05
_MAX_SHARE_ERROR = 0.12


def layer_placement(job: SingleProcessJob) -> Placement:
    """Where `job`'s layer blocks are: device order, resolved by tensor split and memory."""
    devices = job.devices if sorted(job.devices) == sorted(job.gpus) else job.gpus
    prior = Placement(
        tuple(devices), "CUDA_VISIBLE_DEVICES" if devices != job.gpus else "device index", False
    )
    shares = [x for x in job.tensor_split if x > 0]
    mem = [m for m in job.memory_b if m is not None]
    if not (len(shares) == len(mem) == len(job.gpus)) or sum(mem) <= 0:
        return prior
    # The largest tensor-split share is the GPU holding the most memory, and so on down.
    ts = sorted(((x / sum(shares), device) for device, x in enumerate(shares)), reverse=True)
    used = sorted(((m / sum(mem), g) for m, g in zip(mem, job.gpus, strict=True)), reverse=True)
    gaps = [a[0] - b[0] for side in (ts, used) for a, b in itertools.pairwise(side)]
    error = max(abs(a[0] - b[0]) for a, b in zip(ts, used, strict=True))
    if min(gaps) < _MIN_SHARE_GAP or error > _MAX_SHARE_ERROR:
        return prior
    by_device = {device: gpu for (_, device), (_, gpu) in zip(ts, used, strict=True)}
    order = tuple(by_device[i] for i in range(len(shares)))
    return Placement(order, "--tensor-split and memory per GPU", True)


def visible_devices(env: Mapping[str, str], uuids: Mapping[str, int]) -> tuple[int, ...]:
    """GPU indices of CUDA devices 0, 1, ... from CUDA_VISIBLE_DEVICES (() if unset or unread).

    Entries are indices or GPU UUIDs (`uuids`: UUID -> index; a unique prefix is enough,
    as for CUDA itself).
    """
    raw = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    out: list[int] = []
    for entry in (e.strip() for e in raw.split(",") if e.strip()):
        if entry.isdigit():
            out.append(int(entry))
            continue
        found = [i for u, i in uuids.items() if u.startswith(entry)]
        if len(found) != 1:
            return ()
        out.append(found[0])
    return tuple(out)


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
    processes: Mapping[int, Sequence[int]],
    reader: ProcReader,
    *,
    memory: Mapping[int, Mapping[int, int | None]] | None = None,
    uuids: Mapping[str, int] | None = None,
) -> list[SingleProcessJob]:
    """Processes that NVML lists on two or more GPUs, each with its runtime and split.

    `memory`: GPU -> pid -> bytes the pid holds there (NVML's compute processes);
    `uuids`: GPU UUID -> index, to read CUDA_VISIBLE_DEVICES given by UUID.
    """
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
        held_on = tuple(sorted(gpus))
        used = tuple((memory or {}).get(g, {}).get(pid) for g in held_on)
        out.append(
            SingleProcessJob(
                pid, held_on, runtime, split, _tensor_split(argv), used if memory else (),
                visible_devices(env, uuids or {}),
            )
        )  # fmt: skip
    return out
