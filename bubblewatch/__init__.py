"""bubblewatch: find pipeline bubbles in LLM inference servers from GPU telemetry.

Data flows one way: sources -> model (recordings, windows) -> detect -> rules -> sinks.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
