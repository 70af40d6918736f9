"""nvidia-smi rows without an index or uuid column: kept until the whole capture gives their GPUs.

Each row's GPU is its position within its tick, counted again where the
capture restarted (ticks.py); that needs every row's time, so the rows wait
here, in parts, until the end.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers.ticks import gpu_positions

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_Part = tuple[FloatArray, dict[Metric, FloatArray], FloatArray | None]


class UnnamedRows:
    """Rows waiting for their GPU: parts of (times, values, power limits)."""

    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self.n = 0
        self._restarts: list[int] = []

    def restart(self) -> None:
        """The header again (a restarted or concatenated capture): GPU numbering starts again."""
        self._restarts.append(self.n)

    def add_part(
        self, t_s: FloatArray, values: dict[Metric, FloatArray], limit_w: FloatArray | None
    ) -> None:
        self._parts.append((t_s, values, limit_w))
        self.n += t_s.shape[0]

    def take(
        self, gpu_count: int | None
    ) -> tuple[FloatArray, IntArray, dict[Metric, FloatArray], FloatArray] | None:
        """Every row so far: times, GPU of each, values and power limits; None when none."""
        parts = self._parts
        if not parts:
            return None
        t = np.concatenate([p[0] for p in parts])
        metrics = {m for p in parts for m in p[1]}
        values = {
            m: np.concatenate([p[1].get(m, np.full(len(p[0]), np.nan)) for p in parts])
            for m in metrics
        }
        limits = np.concatenate(
            [p[2] if p[2] is not None else np.full(len(p[0]), np.nan) for p in parts]
        )
        self._parts = []
        return t, gpu_positions(t, self._restarts, gpu_count), values, limits
