"""NVML errors translated once, at the boundary, into bubblewatch's own exceptions.

Exception tree (every one carries `call`, the NVML function, and `code`)::

    NvmlError
    ├── NvmlDriverNotFound   no libnvidia-ml, driver not loaded, or no GPU (codes 9, 12)
    ├── NvmlUninitialized    NVML needs (re-)initialising (1)
    ├── NvmlGpuLost          the GPU fell off the bus or needs a reset (15, 16, 28)
    ├── NvmlNotSupported     this GPU or driver cannot answer this call (3, 13)
    ├── NvmlNoData           nothing new to report (NOT_FOUND 6, NO_DATA 21)
    ├── NvmlTimeout          (10)
    └── NvmlNoPermission     (4)

Any other code is a plain `NvmlError`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from bubblewatch.errors import UnavailableError

# NVML return codes (nvml.h / pynvml NVML_ERROR_*), named for logs and metric labels.
CODE_NAMES: dict[int, str] = {
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    4: "no_permission",
    5: "already_initialized",
    6: "not_found",
    7: "insufficient_size",
    8: "insufficient_power",
    9: "driver_not_loaded",
    10: "timeout",
    11: "irq_issue",
    12: "library_not_found",
    13: "function_not_found",
    14: "corrupted_inforom",
    15: "gpu_is_lost",
    16: "reset_required",
    17: "operating_system",
    18: "lib_rm_version_mismatch",
    19: "in_use",
    20: "memory",
    21: "no_data",
    25: "argument_version_mismatch",
    26: "deprecated",
    27: "not_ready",
    28: "gpu_not_found",
    29: "invalid_state",
    999: "unknown",
}

ERROR_NOT_FOUND = 6
ERROR_TIMEOUT = 10
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_ARGUMENT_VERSION_MISMATCH = 25


def code_name(code: int) -> str:
    """A stable lower-case name for an NVML return code."""
    return CODE_NAMES.get(code, f"code_{code}")


class NvmlError(UnavailableError):
    """An NVML call failed; `call` names the function, `code` is NVML's return code."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = code
        msg = f"{call}: NVML error {code} ({code_name(code)})"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class NvmlDriverNotFound(NvmlError):
    """No usable NVIDIA driver: the library is missing, the driver not loaded, or no GPU."""


class NvmlUninitialized(NvmlError):
    """NVML is not initialised (or was shut down under us)."""


class NvmlGpuLost(NvmlError):
    """The GPU is gone until it is reset; other GPUs go on."""


class NvmlNotSupported(NvmlError):
    """The GPU or driver does not support this call."""


class NvmlNoData(NvmlError):
    """Nothing new since the last call (sample buffers); not a failure."""


class NvmlTimeout(NvmlError):
    """The call timed out (event waits: no event)."""


class NvmlNoPermission(NvmlError):
    """The call needs more privileges."""


_CLASSES: dict[int, type[NvmlError]] = {
    1: NvmlUninitialized,
    3: NvmlNotSupported,
    4: NvmlNoPermission,
    6: NvmlNoData,
    9: NvmlDriverNotFound,
    10: NvmlTimeout,
    12: NvmlDriverNotFound,
    13: NvmlNotSupported,
    15: NvmlGpuLost,
    16: NvmlGpuLost,
    21: NvmlNoData,
    28: NvmlGpuLost,
}


def translate(call: str, code: int, detail: str = "") -> NvmlError:
    """The bubblewatch exception for NVML return `code` from `call`."""
    return _CLASSES.get(code, NvmlError)(call, code, detail)


class ErrorCounts:
    """NVML errors counted by (call, code name), for the daemon's self-metrics."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, call: str, code: int) -> None:
        self._counts[(call, code_name(code))] += 1

    def snapshot(self) -> Mapping[tuple[str, str], int]:
        return dict(self._counts)

    def total(self) -> int:
        return sum(self._counts.values())

    def to_dict(self) -> dict[str, dict[str, int]]:
        """{call: {code: count}}, sorted, for JSON."""
        out: dict[str, dict[str, int]] = {}
        for (call, code), n in sorted(self._counts.items()):
            out.setdefault(call, {})[code] = n
        return out
