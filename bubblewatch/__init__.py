"""bubblewatch: find pipeline bubbles in LLM inference servers from GPU telemetry.

Floors that follow the data flow, ground up (docs/architecture.md): model and the root
helpers, engines, topology, sources, sim, detect, rules, sinks, analysis, daemon, cli.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
