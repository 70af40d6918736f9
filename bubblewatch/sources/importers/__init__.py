"""Importers for telemetry recorded by other tools: nvidia-smi CSV and dcgmi dmon text.

The readers are imported when first named (PEP 562), so that reading the
import options, or one format, loads no other format's reader.
"""

from __future__ import annotations

import importlib
from typing import Any

from bubblewatch.sources.importers.import_options import (
    FORMATS,
    ImportOptions,
    parse_time,
    parse_tz,
)

__all__ = [
    "FORMATS",
    "ImportOptions",
    "parse_time",
    "parse_tz",
    "read_dcgmi",
    "read_nvidia_smi",
]

_READERS = {
    "read_dcgmi": "bubblewatch.sources.importers.dcgmi",
    "read_nvidia_smi": "bubblewatch.sources.importers.nvidia_smi",
}


def __getattr__(name: str) -> Any:
    module = _READERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
