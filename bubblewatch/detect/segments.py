"""Phases of a long recording: start-up, loading, steady work, checkpoints, idle tails.

A recording is cut where the GPUs' behaviour changes (binary segmentation of
per-GPU utilisation and activity in bins, each cut paying a penalty that
grows with the number of bins, as BIC does), each phase long enough for the
detector is diagnosed on its own, and neighbours with the same verdict are
merged. `dominant` is the verdict that covers the most time. Labels a file
carries (a `phase` column: annotation events) are attached to each phase.
Pure: a function of the recording.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.diagnose import diagnose
from bubblewatch.detect.grid import Grid, resample, sampling_interval_s
from bubblewatch.detect.levels import power_metric
from bubblewatch.detect.reductions import nan_mean, nan_spread, row_medians
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.model.samples import Event
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology

FloatArray = npt.NDArray[np.float64]

MIN_SEGMENT_S = 30.0
MAX_SEGMENTS = 12
BIN_S = 1.0


@dataclass(frozen=True)
class Segment:
    """One phase: its span (seconds since the epoch), verdict and confidence."""

    start_s: float
    end_s: float
    verdict: Verdict
    confidence: float
    label: str | None = None  # the file's own phase label, where it has one

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self, t0_s: float) -> dict[str, Any]:
        d: dict[str, Any] = {
            "start": round(self.start_s, 3),
            "end": round(self.end_s, 3),
            "start_offset_s": round(self.start_s - t0_s, 1),
            "end_offset_s": round(self.end_s - t0_s, 1),
            "verdict": self.verdict.value,
            "confidence": round(self.confidence, 3),
        }
        if self.label is not None:
            d["label"] = self.label
        return d


@dataclass(frozen=True)
class Phases:
    """The phases of a recording and the verdict that covers the most time."""

    segments: tuple[Segment, ...]
    dominant: Verdict | None

    def to_dict(self) -> dict[str, Any]:
        t0 = self.segments[0].start_s if self.segments else 0.0
        return {
            "segments": [s.to_dict(t0) for s in self.segments],
            "dominant_verdict": None if self.dominant is None else self.dominant.value,
        }


def phases(
    recording: Recording,
    topology: Topology | None = None,
    *,
    options: DetectOptions | None = None,
    schedule: PipelineSchedule | None = None,
    min_segment_s: float = MIN_SEGMENT_S,
    max_segments: int = MAX_SEGMENTS,
    whole: Diagnosis | None = None,
) -> Phases:
    """Cut the recording where behaviour changes and diagnose each phase.

    `whole`: the recording's own diagnosis (same topology, options and schedule),
    where the caller has made it: a phase that holds all of the recording's
    samples, load readings and events takes it rather than running the detector
    on the same data again.
    """
    opts = options or DetectOptions()
    topo = topology if topology is not None else recording.topology
    gpus = topo.gpus if topo is not None else tuple(sorted(recording.series))
    start, end = recording.start_s, recording.end_s
    if not gpus or not np.isfinite(start) or end - start < opts.min_window_s:
        return Phases((), None)
    cuts = change_points(recording, gpus, min_segment_s=min_segment_s, max_segments=max_segments)
    bounds = [start, *cuts, np.nextafter(end, np.inf)]
    segs: list[Segment] = []
    for a, b in itertools.pairwise(bounds):
        part = recording.window(a, b)
        if whole is not None and _holds_all(part, recording):
            d = whole
        else:
            d = diagnose(part, topo, options=opts, schedule=schedule)
        segs.append(Segment(float(a), float(min(b, end)), d.verdict, d.confidence))
    marks = [e for e in recording.events if e.kind == "annotation"]
    labelled = tuple(label_segment(s, marks, recording.end_s) for s in merge_segments(segs))
    return Phases(labelled, dominant(labelled))


def _holds_all(part: Recording, recording: Recording) -> bool:
    """Whether a window of `recording` kept everything in it (so its diagnosis is the same)."""
    return (
        len(part.events) == len(recording.events)
        and part.load.t_s.shape == recording.load.t_s.shape
        and all(len(s) == len(recording.series[g]) for g, s in part.series.items())
    )


def change_points(
    recording: Recording,
    gpus: tuple[int, ...],
    *,
    min_segment_s: float = MIN_SEGMENT_S,
    max_segments: int = MAX_SEGMENTS,
) -> list[float]:
    """Times where the GPUs' utilisation and activity change (binary segmentation)."""
    step = max(sampling_interval_s(recording, gpus), BIN_S)
    grid = resample(recording, gpus, CHANGE_METRICS, step_s=step, max_gap_steps=3.0)
    rows = change_features(grid)
    if rows is None or grid.n_steps < 4:
        return []
    cuts = split_points(rows, step, min_segment_s=min_segment_s, max_segments=max_segments)
    return sorted(float(grid.t_s[k]) for k in cuts)


CHANGE_METRICS = (
    Metric.KERNEL_BUSY_RATIO,
    Metric.SM_ACTIVE_RATIO,
    Metric.POWER_AVG_W,
    Metric.POWER_INSTANT_W,
)


def change_features(grid: Grid) -> FloatArray | None:
    """The rows binary segmentation cuts: per feature, the GPUs' mean and spread per step."""
    per_gpu = []
    for m in (Metric.KERNEL_BUSY_RATIO, Metric.SM_ACTIVE_RATIO):
        a = grid.get(m)
        if a is not None:
            per_gpu.append(a)
    pm = power_metric(grid)
    if pm is not None:
        p = grid.values[pm]
        p_lo, p_hi = np.nanpercentile(p, 1), np.nanpercentile(p, 99)
        per_gpu.append((p - p_lo) / max(p_hi - p_lo, 1e-6))
    # The GPUs of a job move together: their mean per feature (and how far apart they are,
    # which a stall of one GPU changes) rather than every GPU's row, whose noise is shared.
    # Steps where no GPU has a value (a gap between recorded files) stay NaN here and
    # take the row's mean in split_points; numpy's nan-reductions would warn on them.
    rows = []
    for a in per_gpu:
        rows.append(nan_mean(a, axis=0))
        if a.shape[0] > 1:
            rows.append(nan_spread(a, axis=0))
    return np.vstack(rows) if rows else None


def split_points(
    rows: FloatArray, step_s: float, *, min_segment_s: float, max_segments: int
) -> list[int]:
    """Binary segmentation of the rows' columns: the indices where a new segment starts."""
    x = np.where(np.isfinite(rows), rows, nan_mean(rows, axis=1)[:, None])
    x = np.where(np.isfinite(x), x, 0.0)
    min_bins = max(2, round(min_segment_s / step_s))
    # Noise from successive differences (robust to the very changes we look for).
    sigma2 = np.maximum(row_medians(np.abs(np.diff(x, axis=1))) ** 2 / 0.455 / 2.0, 1e-4)
    penalty = 3.0 * np.log(x.shape[1]) * x.shape[0]
    cuts: list[int] = []
    spans = [(0, x.shape[1])]
    while spans and len(cuts) + 1 < max_segments:
        best: tuple[float, int, int, int] | None = None
        for first, last in spans:
            at, gain = _best_split(x[:, first:last], sigma2, min_bins)
            if at is not None and gain > penalty and (best is None or gain > best[0]):
                best = (gain, first, last, first + at)
        if best is None:
            break
        _, lo, hi, cut = best
        spans.remove((lo, hi))
        spans += [(lo, cut), (cut, hi)]
        cuts.append(cut)
    return cuts


def _best_split(x: FloatArray, sigma2: FloatArray, min_bins: int) -> tuple[int | None, float]:
    """The cut of x's columns that most reduces the squared error, in noise units."""
    n = x.shape[1]
    if n < 2 * min_bins:
        return None, 0.0
    c1 = np.cumsum(x, axis=1)
    c2 = np.cumsum(x * x, axis=1)
    k = np.arange(min_bins, n - min_bins + 1)
    left_n, right_n = k, n - k
    left_s, right_s = c1[:, k - 1], c1[:, -1:] - c1[:, k - 1]
    total = c2[:, -1] - c1[:, -1] ** 2 / n
    sse = (c2[:, k - 1] - left_s**2 / left_n) + ((c2[:, -1:] - c2[:, k - 1]) - right_s**2 / right_n)
    gain = ((total[:, None] - sse) / sigma2[:, None]).sum(axis=0)
    i = int(np.argmax(gain))
    return int(k[i]), float(gain[i])


def merge_segments(segs: list[Segment]) -> list[Segment]:
    """Neighbours with the same verdict as one (confidence weighted by duration)."""
    out: list[Segment] = []
    for s in segs:
        if out and out[-1].verdict is s.verdict:
            prev = out[-1]
            w1, w2 = prev.duration_s, s.duration_s
            conf = (prev.confidence * w1 + s.confidence * w2) / max(w1 + w2, 1e-9)
            out[-1] = Segment(prev.start_s, s.end_s, s.verdict, conf)
        else:
            out.append(s)
    return out


def label_segment(seg: Segment, marks: Sequence[Event], end_s: float) -> Segment:
    """The file's own label that covers most of the segment (annotation events `marks`)."""
    if not marks:
        return seg
    cover: dict[str, float] = {}
    for i, e in enumerate(marks):
        nxt = marks[i + 1].t_s if i + 1 < len(marks) else end_s
        overlap = min(nxt, seg.end_s) - max(e.t_s, seg.start_s)
        if overlap > 0:
            key = str(e.detail.get("value"))
            cover[key] = cover.get(key, 0.0) + overlap
    if not cover:
        return seg
    label = max(cover, key=lambda k: cover[k])
    return Segment(seg.start_s, seg.end_s, seg.verdict, seg.confidence, label)


def dominant(segs: tuple[Segment, ...]) -> Verdict | None:
    """The verdict that covers the most time (insufficient data aside)."""
    time: dict[Verdict, float] = {}
    for s in segs:
        if s.verdict is not Verdict.INSUFFICIENT_DATA:
            time[s.verdict] = time.get(s.verdict, 0.0) + s.duration_s
    return max(time, key=lambda v: time[v]) if time else None
