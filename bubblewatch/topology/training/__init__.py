"""Training jobs: launchers, frameworks, parallel layouts and rank -> stage maps.

`discover_training` finds the jobs behind NVML's GPU processes,
`training_from_cmdline` reads a launch command given by hand; both give
`TrainingJob`s whose `layout` (bubblewatch.topology.training.layout) says
p, t, d, cp, ep, v, the batch and micro-batches and the schedule, read as
each framework reads its own flags and config files (one module each:
megatron, nemo, deepspeed, torchtitan; anything else is plain data parallel).
"""

from bubblewatch.topology.training.files import FileSource, LocalFiles, NoFiles, ProcFiles
from bubblewatch.topology.training.handgiven import training_from_cmdline
from bubblewatch.topology.training.jobs import TrainingJob, training_engine
from bubblewatch.topology.training.launchers import LauncherInfo, recognise_launcher
from bubblewatch.topology.training.layout import FRAMEWORKS, LayoutError, ParallelLayout
from bubblewatch.topology.training.procs import discover_training, scan_training

__all__ = [
    "FRAMEWORKS",
    "FileSource",
    "LauncherInfo",
    "LayoutError",
    "LocalFiles",
    "NoFiles",
    "ParallelLayout",
    "ProcFiles",
    "TrainingJob",
    "discover_training",
    "recognise_launcher",
    "scan_training",
    "training_engine",
    "training_from_cmdline",
]
