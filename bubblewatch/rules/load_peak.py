"""The load a fill knob must hold: a high percentile of running + queued requests.

A per-slot cap or a request limit sized for the window it was measured in
becomes the next incident's cause when the load grows: SGLang runs at most
`(pp_size + depth) x cap` requests. So limits are sized from the peak over a
horizon (a day by default) of the load readings the caller has: a recording's
load records, Prometheus history read into one, or the daemon's windows
(`PeakTracker`). Pure: functions of arrays and explicit timestamps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.recording import LoadSeries

__all__ = [
    "DEFAULT_HORIZON_S",
    "PEAK_PERCENTILE",
    "LoadPeak",
    "PeakTracker",
    "load_peak",
    "peak_for",
]

PEAK_PERCENTILE = 95.0
DEFAULT_HORIZON_S = 86_400.0


@dataclass(frozen=True)
class LoadPeak:
    """The p95 of running + queued requests over `span_s` of readings, and where they came from."""

    requests: float
    span_s: float
    source: str  # "recording", "daemon", ...


def load_peak(
    load: LoadSeries,
    *,
    micro_batches_in_flight: float | None = None,
    horizon_s: float = DEFAULT_HORIZON_S,
    source: str = "recording",
) -> LoadPeak | None:
    """The peak of the readings in the last `horizon_s`; None without a running reading.

    Where the engine's gauge counts one micro-batch (SGLang with PP), a reading
    counts `micro_batch x ceil(micro-batches in flight)` running requests (at
    least the reading itself): the in-flight figure is a mean over the window,
    and a limit sized from an estimate must err high (simulator, PP8 at 64
    requests: the mean, 3.1, sized the load at 49 of 64 and starved 8).
    """
    if len(load) == 0:
        return None
    keep = load.t_s >= load.t_s[-1] - horizon_s
    running = load.running[keep]
    if load.micro_batch is not None:
        k = max(math.ceil((micro_batches_in_flight or 1.0) - 1e-9), 1)
        mb = load.micro_batch[keep]
        counted = np.isfinite(mb)
        running = np.where(counted, np.fmax(running, mb * k), running)
    queued = np.nan_to_num(load.queued[keep], nan=0.0)
    ok = np.isfinite(running)
    if not bool(ok.any()):
        return None
    total = running[ok] + queued[ok]
    t = load.t_s[keep][ok]
    return LoadPeak(
        requests=float(np.percentile(total, PEAK_PERCENTILE)),
        span_s=float(t[-1] - t[0]),
        source=source,
    )


def peak_for(
    diagnosis: Diagnosis, load: LoadSeries, *, horizon_s: float = DEFAULT_HORIZON_S
) -> LoadPeak | None:
    """The peak of `load`, counting micro-batch gauges with the diagnosis's in-flight estimate."""
    k = diagnosis.evidence.get("micro_batches_in_flight")
    in_flight = float(k) if isinstance(k, (int, float)) and not isinstance(k, bool) else None
    return load_peak(load, micro_batches_in_flight=in_flight, horizon_s=horizon_s)


class PeakTracker:
    """The daemon's memory of load peaks: one per analysed window, kept for `horizon_s`.

    The peak it gives is the highest window peak within the horizon, so a
    limit sized from it holds the busiest window of the last day, not only
    the current one.
    """

    def __init__(self, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.horizon_s = horizon_s
        self._peaks: deque[tuple[float, float, float]] = deque()  # (end_s, requests, span_s)

    def add(self, end_s: float, peak: LoadPeak | None) -> LoadPeak | None:
        """Remember the window ending at `end_s`; the peak over the horizon so far."""
        if peak is not None and math.isfinite(end_s):
            self._peaks.append((end_s, peak.requests, peak.span_s))
        while self._peaks and self._peaks[0][0] < end_s - self.horizon_s:
            self._peaks.popleft()
        if not self._peaks:
            return None
        first_end, _, first_span = self._peaks[0]
        last_end = self._peaks[-1][0]
        return LoadPeak(
            requests=max(p for _, p, _ in self._peaks),
            span_s=last_end - first_end + first_span,
            source="daemon",
        )

    def clear(self) -> None:
        self._peaks.clear()
