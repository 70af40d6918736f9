"""Topology discovery: serving engines, their flags, and GPU -> (stage, TP rank)."""

from bubblewatch.topology.engine import EngineConfig

__all__ = ["EngineConfig"]
