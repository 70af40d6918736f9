"""A recording too long to hold whole, analysed window by window in one pass.

Each window (a few minutes, see `analyze --window`) is diagnosed on its own;
meanwhile the features that find phases (segments.change_features: the
GPUs' utilisation, activity and power on a 1 s grid, BIN_S) are gathered
window by window on one grid for the whole recording (the last sample of each
GPU carried over, so the grid is the one a whole recording would give). At
the end the recording is cut where its behaviour changes, as
`segments.phases` cuts a short one, and each phase takes the verdict of the
windows that cover most of its time. The headline diagnosis is the window
with the most confident diagnosis of the verdict that covers the most time.
Past 36 hours (_MAX_POINTS seconds) the phases are cut on runs of seconds
averaged together (5 s for a week), so that finding them stays bounded.
Memory: one window and its diagnosis, and the phase features (a few numbers
per second of recording).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.diagnose import diagnose
from bubblewatch.detect.grid import resample_at, sampling_interval_s
from bubblewatch.detect.reductions import nan_mean, nan_spread
from bubblewatch.detect.segments import (
    BIN_S,
    CHANGE_METRICS,
    MAX_SEGMENTS,
    MIN_SEGMENT_S,
    Phases,
    Segment,
    dominant,
    label_segment,
    merge_segments,
    split_points,
)
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.model.samples import Event
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology

FloatArray = npt.NDArray[np.float64]
T = TypeVar("T")

# Power values kept for the phase features' percentiles; beyond, every other one is dropped.
_POWER_KEEP = 1 << 22
# Grid points the phases are cut on; a longer recording's points are averaged in runs.
_MAX_POINTS = 1 << 17


@dataclass(frozen=True)
class WindowResult:
    """One window's verdict."""

    start_s: float
    end_s: float
    verdict: Verdict
    confidence: float
    n_samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": round(self.start_s, 3),
            "end": round(self.end_s, 3),
            "verdict": self.verdict.value,
            "confidence": round(self.confidence, 3),
            "n_samples": self.n_samples,
        }


@dataclass(frozen=True)
class LongAnalysis(Generic[T]):
    """What `analyse_windows` found: the headline, the windows, the phases and the totals."""

    headline: Diagnosis
    headline_window: WindowResult
    extra: T | None  # what `keep` made of the headline's window
    windows: tuple[WindowResult, ...]
    phases: Phases
    n_samples: int
    start_s: float
    end_s: float
    last: Recording  # the last window (its meta and GPUs are the whole recording's)


def analyse_windows(
    windows: Iterable[Recording],
    topology: Callable[[Recording], Topology | None],
    *,
    options: DetectOptions | None = None,
    schedule: PipelineSchedule | None = None,
    keep: Callable[[Recording, Diagnosis], T] | None = None,
    min_segment_s: float = MIN_SEGMENT_S,
    max_segments: int = MAX_SEGMENTS,
) -> LongAnalysis[T] | None:
    """Diagnose each window and find the phases of the whole; None if there was no window.

    `topology(window)` gives the topology to diagnose with (the CLI's choice,
    or what the recording carries); `keep(window, diagnosis)` is kept for the
    windows that may end up the headline (a picture of the stages, say).
    """
    opts = options or DetectOptions()
    results: list[WindowResult] = []
    best: dict[Verdict, tuple[WindowResult, Diagnosis, T | None]] = {}
    features: _Features | None = None
    annotations: list[Event] = []
    last: Recording | None = None
    total = 0
    for window in windows:
        last = window
        annotations += [e for e in window.events if e.kind == "annotation"]
        if not window.n_samples:
            continue
        total += window.n_samples
        topo = topology(window)
        gpus = topo.gpus if topo is not None else tuple(sorted(window.series))
        if features is None:
            features = _Features.start(window, gpus)
        if features is not None:
            features.add(window)
        d = diagnose(window, topo, options=opts, schedule=schedule)
        r = WindowResult(
            window.start_s, window.end_s, d.verdict, float(d.confidence), window.n_samples
        )
        results.append(r)
        held = best.get(r.verdict)
        if held is None or r.confidence > held[0].confidence:
            best[r.verdict] = (r, d, keep(window, d) if keep is not None else None)
    if last is None or not results:
        return None
    start = min(r.start_s for r in results)
    end = max(r.end_s for r in results)
    cuts = [] if features is None else features.cuts(min_segment_s, max_segments)
    segs = _phase_segments([start, *cuts, end], results)
    merged = tuple(label_segment(s, annotations, end) for s in merge_segments(segs))
    phases = Phases(merged, dominant(merged))
    top = (
        phases.dominant
        if phases.dominant in best
        else max(best, key=lambda v: best[v][0].n_samples)
    )
    headline_window, headline, extra = best[top]
    return LongAnalysis(
        headline, headline_window, extra, tuple(results), phases, total, start, end, last
    )


def _phase_segments(bounds: list[float], results: list[WindowResult]) -> list[Segment]:
    """Each phase's verdict: the one whose windows cover most of it (confidence: their mean)."""
    out = []
    for a, b in itertools.pairwise(bounds):
        cover: dict[Verdict, list[tuple[float, float]]] = {}
        for r in results:
            overlap = min(b, r.end_s) - max(a, r.start_s)
            if overlap > 0:
                cover.setdefault(r.verdict, []).append((overlap, r.confidence))
        if not cover:
            continue
        real: list[Verdict] = [v for v in cover if v is not Verdict.INSUFFICIENT_DATA]
        real = real or list(cover)
        verdict = max(real, key=lambda v: sum(w for w, _ in cover[v]))
        weights = cover[verdict]
        conf = sum(w * c for w, c in weights) / max(sum(w for w, _ in weights), 1e-9)
        out.append(Segment(float(a), float(b), verdict, float(conf)))
    return out


@dataclass
class _Features:
    """The phase features on one grid for the whole recording, gathered window by window."""

    gpus: tuple[int, ...]
    t0_s: float
    step_s: float
    done: int = 0  # grid points computed so far
    carry: dict[int, GpuSeries] = field(default_factory=dict)  # each GPU's last sample
    rows: list[FloatArray] = field(default_factory=list)  # blocks of (6, n) feature rows
    power: list[npt.NDArray[np.float32]] = field(default_factory=list)
    power_n: int = 0
    thin: int = 1

    @classmethod
    def start(cls, window: Recording, gpus: tuple[int, ...]) -> _Features:
        present = [g for g in gpus if len(window.series.get(g, ())) > 0]
        step = max(sampling_interval_s(window, present), BIN_S)
        if not math.isfinite(step):
            step = BIN_S
        t0 = max(float(window.series[g].t_s[0]) for g in present)
        return cls(gpus, t0, step)

    def add(self, window: Recording) -> None:
        """The grid points whose neighbouring samples this window (and the carry) hold."""
        series = {g: self._with_carry(g, window.series.get(g)) for g in self.gpus}
        lasts = [float(s.t_s[-1]) for g, s in series.items() if len(s) and g in window.series]
        if not lasts:
            return
        for g, s in series.items():
            if len(s):
                last = {m: v[-1:] for m, v in s.values.items() if m in CHANGE_METRICS}
                self.carry[g] = GpuSeries(g, s.t_s[-1:], last)
        upto = min(lasts)
        hi = math.floor((upto - self.t0_s) / self.step_s) + 1
        if hi <= self.done:
            return
        t = self.t0_s + self.step_s * np.arange(self.done, hi, dtype=np.float64)
        rec = Recording(gpus=window.gpus, series=series)
        have = [g for g in self.gpus if len(series[g])]
        grid = resample_at(rec, have, CHANGE_METRICS, t, step_s=self.step_s, max_gap_steps=3.0)
        block = np.full((6, t.size), np.nan)
        for k, m in enumerate((Metric.KERNEL_BUSY_RATIO, Metric.SM_ACTIVE_RATIO)):
            a = grid.get(m)
            if a is not None:
                block[2 * k] = nan_mean(a, axis=0)
                block[2 * k + 1] = nan_spread(a, axis=0) if a.shape[0] > 1 else np.nan
        p = grid.get(Metric.POWER_INSTANT_W)
        if p is None or not np.isfinite(p).any():
            p = grid.get(Metric.POWER_AVG_W)
        if p is not None:
            block[4] = nan_mean(p, axis=0)
            block[5] = nan_spread(p, axis=0) if p.shape[0] > 1 else np.nan
            self._keep_power(p)
        self.rows.append(block)
        self.done = hi

    def _with_carry(self, g: int, s: GpuSeries | None) -> GpuSeries:
        prev = self.carry.get(g)
        if s is None or not len(s):
            return prev if prev is not None else GpuSeries(g, np.zeros(0), {})
        if prev is None:
            return s
        # Only the features' metrics: the others would be copied for nothing.
        metrics = [m for m in CHANGE_METRICS if m in prev.values or m in s.values]
        nan = np.full(1, np.nan)
        return GpuSeries(
            g,
            np.concatenate([prev.t_s, s.t_s]),
            {
                m: np.concatenate(
                    [prev.values.get(m, nan), s.values.get(m, np.full(len(s), np.nan))]
                )
                for m in metrics
            },
        )

    def _keep_power(self, p: FloatArray) -> None:
        vals = p[np.isfinite(p)].astype(np.float32)[:: self.thin]
        self.power.append(vals)
        self.power_n += vals.size
        if self.power_n > _POWER_KEEP:  # thin what is kept, and what comes, by half
            kept = np.concatenate(self.power)[::2]
            self.power, self.power_n, self.thin = [kept], kept.size, self.thin * 2

    def cuts(self, min_segment_s: float, max_segments: int) -> list[float]:
        if not self.rows:
            return []
        x = np.concatenate(self.rows, axis=1)
        if self.power_n:
            vals = np.concatenate(self.power).astype(np.float64)
            p_lo, p_hi = np.percentile(vals, 1), np.percentile(vals, 99)
            scale = max(float(p_hi - p_lo), 1e-6)
            x[4] = (x[4] - p_lo) / scale
            x[5] = x[5] / scale
        keep = np.isfinite(x).any(axis=1)
        x, step = _coarse(x[keep], self.step_s)
        if x.shape[0] == 0 or x.shape[1] < 4:
            return []
        idx = split_points(x, step, min_segment_s=min_segment_s, max_segments=max_segments)
        return sorted(self.t0_s + step * k for k in idx)


def _coarse(x: FloatArray, step_s: float) -> tuple[FloatArray, float]:
    """Columns averaged in runs so that at most _MAX_POINTS remain (a week: 5 s instead of 1 s)."""
    n = x.shape[1]
    k = -(-n // _MAX_POINTS)
    if k <= 1:
        return x, step_s
    m = n // k
    runs = x[:, : m * k].reshape(x.shape[0], m, k)
    ok = np.isfinite(runs)
    count = ok.sum(axis=2)
    total = np.where(ok, runs, 0.0).sum(axis=2)
    with np.errstate(invalid="ignore"):
        out = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out, step_s * k
