"""nvidia-smi rows without an index or uuid column: kept until the whole capture gives their GPUs.

Each row's GPU is its position within its tick, counted again where the
capture restarted (ticks.py); that needs every row's time, so the rows wait
here, in parts, until the end.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers._pieces import value_columns
from bubblewatch.sources.importers.ticks import gpu_positions

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_Part = tuple[FloatArray, dict[Metric, FloatArray], FloatArray | None]


class UnnamedRows:
    """Rows waiting for their GPU: parts (times, values, power limits), rows not yet a part."""

    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self._rows: list[tuple[float, dict[Metric, float], float | None]] = []
        self.n = 0
        self._restarts: list[int] = []

    def restart(self) -> None:
        """The header again (a restarted or concatenated capture): GPU numbering starts again."""
        self._restarts.append(self.n)

    def add_row(self, t_s: float, values: dict[Metric, float], limit_w: float | None) -> None:
        self._rows.append((t_s, values, limit_w))
        self.n += 1

    def add_part(
        self, t_s: FloatArray, values: dict[Metric, FloatArray], limit_w: FloatArray | None
    ) -> None:
        self._flush()
        self._parts.append((t_s, values, limit_w))
        self.n += t_s.shape[0]

    def take(
        self, gpu_count: int | None
    ) -> tuple[FloatArray, IntArray, dict[Metric, FloatArray], FloatArray] | None:
        """Every row so far: times, GPU of each, values and power limits; None when none."""
        self._flush()
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

    def _flush(self) -> None:
        rows = self._rows
        if not rows:
            return
        self._rows = []
        self._parts.append(
            (
                np.array([r[0] for r in rows], dtype=np.float64),
                value_columns([r[1] for r in rows]),
                np.array([np.nan if r[2] is None else r[2] for r in rows]),
            )
        )
