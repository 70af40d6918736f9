"""Live telemetry through NVML (nvidia-ml-py's `pynvml`).

- `api.Nvml`: the only module that calls pynvml; translates and counts errors.
- `capabilities.probe`: what each GPU supports, checked once.
- `reader.GpuReader`: one GPU's readings (GPM spacing, driver sample buffers).
- `sampler.NvmlSource`: all GPUs, base/burst rates, lost GPUs, Xid events.
- `loop.run`: the monotonic-deadline scheduling loop.

See docs/nvml.md.
"""

from bubblewatch.sources.nvml.api import Nvml
from bubblewatch.sources.nvml.capabilities import Capabilities, Capability, probe
from bubblewatch.sources.nvml.errors import (
    ErrorCounts,
    NvmlDriverNotFound,
    NvmlError,
    NvmlGpuLost,
    NvmlNoData,
    NvmlNotSupported,
    NvmlTimeout,
    NvmlUninitialized,
)
from bubblewatch.sources.nvml.loop import run
from bubblewatch.sources.nvml.reader import GpuReader
from bubblewatch.sources.nvml.sampler import NvmlSource, SamplerConfig

__all__ = [
    "Capabilities",
    "Capability",
    "ErrorCounts",
    "GpuReader",
    "Nvml",
    "NvmlDriverNotFound",
    "NvmlError",
    "NvmlGpuLost",
    "NvmlNoData",
    "NvmlNotSupported",
    "NvmlSource",
    "NvmlTimeout",
    "NvmlUninitialized",
    "SamplerConfig",
    "probe",
    "run",
]
