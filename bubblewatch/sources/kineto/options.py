"""How the Kineto source turns kernel intervals into telemetry: grid, sizes, thresholds."""

from __future__ import annotations

import math
from dataclasses import dataclass

from bubblewatch.sources.kineto.reader import DEFAULT_COMM_PATTERN


@dataclass(frozen=True)
class KinetoOptions:
    """How to turn kernel intervals into telemetry.

    `bin_s`: grid step of the Recording. `pp_size`/`tp_size`: the engine's
    parallel sizes when the traces do not say. `burst_gap_us`: kernel gaps
    shorter than this are launch gaps inside one stage step, longer ones are
    waits between steps (used for the stagger). `comm_pattern`: regular
    expression for communication kernel names.
    """

    bin_s: float = 0.01
    pp_size: int | None = None
    tp_size: int | None = None
    burst_gap_us: float = 200.0
    comm_pattern: str = DEFAULT_COMM_PATTERN

    def __post_init__(self) -> None:
        if not (self.bin_s > 0 and math.isfinite(self.bin_s)):
            raise ValueError(f"bin_s must be a positive number of seconds, got {self.bin_s!r}")
        for name in ("pp_size", "tp_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1, got {v!r}")
        if self.burst_gap_us < 0:
            raise ValueError(f"burst_gap_us must be >= 0, got {self.burst_gap_us!r}")
