"""Readers of telemetry: live NVML, trace files, importers, Kineto, Prometheus history, engines."""
