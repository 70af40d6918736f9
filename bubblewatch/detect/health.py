"""Per-GPU clock and throttle figures from raw samples, for the straggler signature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bubblewatch.detect.reductions import median
from bubblewatch.model.metrics import THROTTLE_MASK, Metric, clocks_event_names
from bubblewatch.model.recording import Recording


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's throttling over the window."""

    gpu: int
    throttle_fraction: float | None  # share of samples with a power/thermal reason set
    throttle_reasons: tuple[str, ...]
    sm_clock_mhz: float | None  # median SM clock over samples where it computed


def gpu_health(recording: Recording, gpus: Sequence[int]) -> tuple[GpuHealth, ...]:
    """Throttle share, reasons seen and working clock for each GPU."""
    out = []
    for g in gpus:
        s = recording.series[g]
        reasons = s.get(Metric.CLOCKS_EVENT_REASONS)
        frac: float | None = None
        names: tuple[str, ...] = ()
        if reasons is not None:
            r = reasons[np.isfinite(reasons)].astype(np.int64)
            throttled = (r & THROTTLE_MASK) != 0
            frac = float(throttled.mean()) if r.size else None
            seen = int(np.bitwise_or.reduce(r & THROTTLE_MASK)) if r.size else 0
            names = tuple(clocks_event_names(seen))
        clock = s.get(Metric.SM_CLOCK_MHZ)
        mhz: float | None = None
        if clock is not None:
            c = clock[np.isfinite(clock)]
            # Idle GPUs drop their clock; the working clock is the upper half.
            mhz = median(c[c >= median(c)]) if c.size else None
        out.append(GpuHealth(g, frac, names, mhz))
    return tuple(out)
