"""Topology discovery: serving engines, their flags, and GPU -> (stage, TP rank)."""

from bubblewatch.topology.cmdline import EngineArgsError, detect_engine, parse_engine_cmdline
from bubblewatch.topology.discover import (
    DiscoveredPipeline,
    DiscoveryResult,
    discover_from_cmdline,
    discover_topology,
)
from bubblewatch.topology.engine import EngineConfig
from bubblewatch.topology.gpumap import GpuMapError, map_gpus, visible_devices
from bubblewatch.topology.procfs import ProcFS, ProcReader, ProcUnavailable
from bubblewatch.topology.redact import REDACTED, redact_argv, redact_env, redact_text
from bubblewatch.topology.static import StaticPipeline, load_static_pipelines, load_topology_file

__all__ = [
    "REDACTED",
    "DiscoveredPipeline",
    "DiscoveryResult",
    "EngineArgsError",
    "EngineConfig",
    "GpuMapError",
    "ProcFS",
    "ProcReader",
    "ProcUnavailable",
    "StaticPipeline",
    "detect_engine",
    "discover_from_cmdline",
    "discover_topology",
    "load_static_pipelines",
    "load_topology_file",
    "map_gpus",
    "parse_engine_cmdline",
    "redact_argv",
    "redact_env",
    "redact_text",
    "visible_devices",
]
