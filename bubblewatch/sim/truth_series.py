"""Ground truth per window of a simulated run: what each GPU and pipeline really did.

The simulator knows every stage interval, so it knows, per window of
`TRUTH_WINDOW_S` (1 s; the last may be shorter) and per GPU: the share of the
window spent computing (`busy`), spinning in an NCCL receive (`spin`), the
energy drawn (`energy_j`) and the energy above idle drawn while waiting
(`bubble_energy_j`: the spin kernel's draw, power.wait_power_above_idle_w); per
pipeline replica: the micro-batches in flight (time-weighted mean). Any
longer window's truth is a sum (energies) or a span-weighted mean (shares) of
these. A trace carries them as `x_truth` records, one per window, after the
samples and before the summary; trace readers skip `x_` records, so the
detector never sees them (docs/trace-format.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
TRUTH_WINDOW_S = 1.0
TRUTH_RECORD = "x_truth"


@dataclass(frozen=True)
class TruthSeries:
    """Per-window truth: (n_gpus, n) shares and energies, (n_replicas, n) micro-batches."""

    t_s: FloatArray  # (n,) window starts, seconds from the run's start
    span_s: FloatArray  # (n,) window lengths
    busy: FloatArray
    spin: FloatArray
    energy_j: FloatArray
    bubble_energy_j: FloatArray
    in_flight: FloatArray

    @property
    def n_windows(self) -> int:
        return int(self.t_s.size)

    def over(self, start_s: float, end_s: float) -> TruthSeries:
        """The windows that start within [start_s, end_s) (seconds from the run's start)."""
        k = (self.t_s >= start_s - 1e-9) & (self.t_s < end_s - 1e-9)
        return TruthSeries(
            self.t_s[k],
            self.span_s[k],
            self.busy[:, k],
            self.spin[:, k],
            self.energy_j[:, k],
            self.bubble_energy_j[:, k],
            self.in_flight[:, k],
        )

    def mean_busy(self) -> FloatArray:
        """Per GPU, the busy share over all these windows."""
        w = self.span_s
        out: FloatArray = (self.busy * w).sum(axis=1) / max(float(w.sum()), 1e-12)
        return out

    def mean_in_flight(self) -> FloatArray:
        """Per replica, the micro-batches in flight over all these windows."""
        w = self.span_s
        out: FloatArray = (self.in_flight * w).sum(axis=1) / max(float(w.sum()), 1e-12)
        return out

    def records(self, epoch_s: float) -> Iterator[dict[str, Any]]:
        """One `x_truth` record per window (`t`: its start, epoch seconds)."""
        for k in range(self.n_windows):
            yield {
                "type": TRUTH_RECORD,
                "t": round(float(self.t_s[k]) + epoch_s, 6),
                "span_s": round(float(self.span_s[k]), 6),
                "busy": [round(float(v), 5) for v in self.busy[:, k]],
                "spin": [round(float(v), 5) for v in self.spin[:, k]],
                "energy_j": [round(float(v), 3) for v in self.energy_j[:, k]],
                "bubble_energy_j": [round(float(v), 3) for v in self.bubble_energy_j[:, k]],
                "in_flight": [round(float(v), 4) for v in self.in_flight[:, k]],
            }


class TruthAccumulator:
    """Sums cell activity into truth windows, a part of the run at a time."""

    def __init__(self, n_gpus: int, n_cells: int, dt_s: float) -> None:
        self.dt_s = dt_s
        self.per = max(1, round(TRUTH_WINDOW_S / dt_s))
        self.n_cells = n_cells
        n = math.ceil(n_cells / self.per)
        self._sums = {k: np.zeros((n_gpus, n)) for k in ("busy", "spin", "energy", "bubble")}

    def add(
        self,
        first_cell: int,
        *,
        busy: FloatArray,
        spin: FloatArray,
        power_w: npt.NDArray[Any],
        wait_w: FloatArray,
    ) -> None:
        """Cells from `first_cell` on: (n_gpus, k) busy and spin shares, power, waiting draw."""
        k = busy.shape[1]
        window = (first_cell + np.arange(k)) // self.per
        for name, arr in (
            ("busy", busy),
            ("spin", spin),
            ("energy", power_w.astype(np.float64) * self.dt_s),
            ("bubble", wait_w * self.dt_s),
        ):
            for g in range(arr.shape[0]):
                self._sums[name][g] += np.bincount(
                    window, weights=arr[g], minlength=self._sums[name].shape[1]
                )

    def result(self, in_flight: list[tuple[FloatArray, FloatArray]]) -> TruthSeries:
        """The windows; `in_flight`: per replica, its (t_s, count) step function."""
        n = self._sums["busy"].shape[1]
        cells = np.minimum(self.per, self.n_cells - np.arange(n) * self.per).astype(np.float64)
        t: FloatArray = np.arange(n, dtype=np.float64) * (self.per * self.dt_s)
        span = cells * self.dt_s
        edges = np.append(t, t[-1] + span[-1]) if n else np.zeros(1)
        flight = np.array([step_window_means(ts, v, edges) for ts, v in in_flight])
        return TruthSeries(
            t_s=t,
            span_s=span,
            busy=self._sums["busy"] / cells,
            spin=self._sums["spin"] / cells,
            energy_j=self._sums["energy"],
            bubble_energy_j=self._sums["bubble"],
            in_flight=flight.reshape(len(in_flight), n),
        )


def step_window_means(t_s: FloatArray, v: FloatArray, edges: FloatArray) -> FloatArray:
    """Mean over each [edges[i], edges[i+1]) of the step function v (holds from t_s[i] on)."""
    if t_s.size == 0:
        return np.zeros(edges.size - 1)
    # The integral from 0 to each edge: the full steps before it plus the part of its step.
    full = np.concatenate([[0.0], np.cumsum(v[:-1] * np.diff(t_s))])
    k = np.clip(np.searchsorted(t_s, edges, side="right") - 1, 0, t_s.size - 1)
    before = edges < t_s[0]
    at = np.where(before, 0.0, full[k] + v[k] * (edges - t_s[k]))
    out: FloatArray = np.diff(at) / np.maximum(np.diff(edges), 1e-12)
    return out
