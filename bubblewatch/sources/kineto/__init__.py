"""PyTorch profiler (Kineto) traces as a telemetry source: exact kernel busy time per rank.

`load_kineto(paths)` reads one trace file per rank (or a directory of them),
streams each file, and returns a `Recording` whose `sm_active_ratio` is the
compute-kernel busy fraction per bin and `kernel_busy_ratio` the any-kernel
busy fraction, with exact totals and the stage stagger under `meta["kineto"]`.

The names are imported at their first use (PEP 562): `bubblewatch analyze`
sniffs every input with `is_kineto_trace`, and an nvidia-smi capture should not
pay for the trace reader and the recording builder.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bubblewatch.sources.kineto.build import build_recording
    from bubblewatch.sources.kineto.loader import load_kineto, trace_files
    from bubblewatch.sources.kineto.options import KinetoOptions
    from bubblewatch.sources.kineto.reader import DEFAULT_COMM_PATTERN, RankTrace, read_rank_trace
    from bubblewatch.sources.kineto.sniff import is_kineto_trace

# Each name and the module of this package that defines it.
_HOME = {
    "DEFAULT_COMM_PATTERN": "reader",
    "KinetoOptions": "options",
    "RankTrace": "reader",
    "build_recording": "build",
    "is_kineto_trace": "sniff",
    "load_kineto": "loader",
    "read_rank_trace": "reader",
    "trace_files": "loader",
}

__all__ = [
    "DEFAULT_COMM_PATTERN",
    "KinetoOptions",
    "RankTrace",
    "build_recording",
    "is_kineto_trace",
    "load_kineto",
    "read_rank_trace",
    "trace_files",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
