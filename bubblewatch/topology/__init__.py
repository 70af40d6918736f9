"""Topology discovery: serving engines, their flags, and GPU -> (stage, TP rank).

No re-exports: importing one module (say `topology.engine_config`) does not load
discovery, the training frameworks or the YAML reader.
"""
