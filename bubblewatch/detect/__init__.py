"""Pure analysis: telemetry windows plus topology to a Diagnosis with evidence.

Nothing here does I/O, reads clocks or imports pynvml.
"""

from bubblewatch.detect.types import Diagnosis, Finding, LoadContext, StageStats, Verdict

__all__ = ["Diagnosis", "Finding", "LoadContext", "StageStats", "Verdict"]
