"""Sources of telemetry: trace files, importers, the simulator and live NVML."""
