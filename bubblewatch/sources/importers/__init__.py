"""Importers for telemetry recorded by other tools: nvidia-smi CSV and dcgmi dmon text."""

from bubblewatch.sources.importers.dcgmi import read_dcgmi
from bubblewatch.sources.importers.import_options import (
    FORMATS,
    ImportOptions,
    parse_time,
    parse_tz,
)
from bubblewatch.sources.importers.nvidia_smi import read_nvidia_smi

__all__ = [
    "FORMATS",
    "ImportOptions",
    "parse_time",
    "parse_tz",
    "read_dcgmi",
    "read_nvidia_smi",
]
