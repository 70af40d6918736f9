"""The GPU model an operator names for a recording that names none (`--gpu-model`).

dcgmi dmon captures, nvidia-smi captures without `name`, some Prometheus
exports and profiler traces say nothing of the card. Its model decides the
default power limit and whether NVML's power reading is a 1 s mean or an
instant (bubblewatch.model.gpu_models), so a given name is written into each
GPU the recording leaves unnamed, as if the file had named it. Where the
recording names a GPU, the recording wins: it was written where the card ran.
A given model that disagrees with a recorded one is said once on stderr.
Which GPUs took the given name is kept in the recording's
`meta["gpu_model_from"]` (GPU index -> "option" or "recording"); the
diagnosis's evidence says it (`gpu_model_from`).
"""

from __future__ import annotations

import dataclasses
import sys

from bubblewatch.errors import InputError
from bubblewatch.model.gpu_models import EXAMPLE_NAMES, is_known, same_model
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import index_ranges

OPTION = "--gpu-model"
FROM_OPTION, FROM_RECORDING = "option", "recording"


def check_gpu_model(name: str) -> str:
    """`name` stripped, if the GPU model table knows it; else InputError listing known ones."""
    given = name.strip()
    if not is_known(given):
        examples = ", ".join(repr(n) for n in EXAMPLE_NAMES[:6])
        raise InputError(
            f"unknown GPU model {name!r}: give a name as nvidia-smi prints it, e.g. {examples}",
            path=OPTION,
        )
    return given


class GivenGpuModel:
    """Names the unnamed GPUs of a recording (or of each of its pieces) `name`.

    The disagreement with a recorded name is said once per instance, however
    many pieces it names.
    """

    def __init__(self, name: str) -> None:
        self.name = check_gpu_model(name)
        self._warned = False

    def apply(self, recording: Recording) -> Recording:
        """`recording` with its unnamed GPUs named, and where each GPU's name came from."""
        gpus = list(recording.gpus)
        listed = {g.index for g in gpus}
        gpus += [GpuInfo(index=g) for g in sorted(recording.series) if g not in listed]
        named = tuple(g if g.name else dataclasses.replace(g, name=self.name) for g in gpus)
        source = {str(g.index): FROM_RECORDING if g.name else FROM_OPTION for g in gpus}
        self._warn([g for g in gpus if g.name and not same_model(g.name, self.name)])
        return dataclasses.replace(
            recording, gpus=named, meta={**recording.meta, "gpu_model_from": source}
        )

    def _warn(self, differ: list[GpuInfo]) -> None:
        if self._warned or not differ:
            return
        self._warned = True
        names = " / ".join(sorted({g.name for g in differ}))
        print(
            f"bubblewatch: warning: {OPTION} {self.name!r} is not used for GPU(s) "
            f"{index_ranges(sorted(g.index for g in differ))}: the recording names them "
            f"{names!r}, and what a recording names wins",
            file=sys.stderr,
        )
