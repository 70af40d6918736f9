"""Pure analysis: telemetry windows plus topology to a Diagnosis with evidence.

Nothing here does I/O, reads clocks or imports pynvml.
"""

from bubblewatch.detect.diagnose import diagnose, load_context
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import (
    EVIDENCE_KEYS,
    Diagnosis,
    Finding,
    LoadContext,
    StageStats,
    Verdict,
)

__all__ = [
    "EVIDENCE_KEYS",
    "DetectOptions",
    "Diagnosis",
    "Finding",
    "LoadContext",
    "StageStats",
    "Verdict",
    "diagnose",
    "load_context",
]
