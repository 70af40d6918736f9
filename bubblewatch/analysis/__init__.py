"""The one analysis path: resolve what a window is (target), then analyse it (window).

Every CLI command and the daemon come through here: `resolve_target` (or
`target_for` where the topology is already known) gives the topology, engine,
version and training schedule; `analyse_window` (or `diagnose_window` then
`judge`, where the caller carries state between windows) gives the diagnosis,
the facts and the rules' recommendations. It sits between sinks/rules and the
daemon/cli, and imports neither of those. `GivenGpuModel` names the GPUs a
recording leaves unnamed (`--gpu-model`) before it is analysed.
"""

from bubblewatch.analysis.gpu_model import GivenGpuModel, check_gpu_model
from bubblewatch.analysis.target import (
    Target,
    engine_from_cmdline,
    recorded_schedule,
    resolve_engine,
    resolve_schedule,
    resolve_target,
    resolve_topology,
    target_for,
    training_schedule,
)
from bubblewatch.analysis.window import (
    WindowAnalysis,
    analyse_window,
    diagnose_window,
    judge,
    judge_recorded,
    peak_of,
)

__all__ = [
    "GivenGpuModel",
    "Target",
    "WindowAnalysis",
    "analyse_window",
    "check_gpu_model",
    "diagnose_window",
    "engine_from_cmdline",
    "judge",
    "judge_recorded",
    "peak_of",
    "recorded_schedule",
    "resolve_engine",
    "resolve_schedule",
    "resolve_target",
    "resolve_topology",
    "target_for",
    "training_schedule",
]
