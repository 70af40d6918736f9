"""Exact interval arithmetic on GPU kernel timelines, vectorised with numpy.

Kernels on different streams overlap; busy time is the length of their union,
not the sum of their durations. Times here are microseconds (float64) on one
clock; all functions are pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Intervals:
    """Disjoint, sorted half-open intervals [start_us, end_us)."""

    start_us: FloatArray
    end_us: FloatArray

    @classmethod
    def empty(cls) -> Intervals:
        return cls(np.zeros(0), np.zeros(0))

    def __len__(self) -> int:
        return int(self.start_us.shape[0])

    @property
    def total_us(self) -> float:
        return float(np.sum(self.end_us - self.start_us))

    def shifted(self, offset_us: float) -> Intervals:
        return Intervals(self.start_us + offset_us, self.end_us + offset_us)


def union(start_us: npt.ArrayLike, end_us: npt.ArrayLike) -> Intervals:
    """Merge possibly overlapping intervals into disjoint sorted ones (touching ones join)."""
    s = np.asarray(start_us, dtype=np.float64)
    e = np.asarray(end_us, dtype=np.float64)
    if s.shape != e.shape:
        raise ValueError(f"start and end arrays differ in shape: {s.shape} vs {e.shape}")
    if s.size == 0:
        return Intervals.empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum(e[order], s[order])
    reach = np.maximum.accumulate(e)
    # A new merged interval starts where a start lies beyond everything before it.
    new = np.empty(s.shape, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return Intervals(s[first], reach[last])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of `a` not covered by `b` (both disjoint and sorted)."""
    if len(a) == 0 or len(b) == 0:
        return a
    # Boundaries of a and b together; a segment is kept if inside a and outside b.
    edges = np.unique(np.concatenate([a.start_us, a.end_us, b.start_us, b.end_us]))
    lo, hi = edges[:-1], edges[1:]
    mid = (lo + hi) / 2
    in_a = _contains(a, mid)
    in_b = _contains(b, mid)
    keep = in_a & ~in_b
    return union(lo[keep], hi[keep])


def _contains(iv: Intervals, t: FloatArray) -> npt.NDArray[np.bool_]:
    k = np.searchsorted(iv.start_us, t, side="right") - 1
    ok = k >= 0
    kk = np.clip(k, 0, None)
    return ok & (t < iv.end_us[kk]) if len(iv) else np.zeros(t.shape, dtype=bool)


def covered_before(iv: Intervals, t_us: npt.ArrayLike) -> FloatArray:
    """Busy time of `iv` in (-inf, t) for each t: a cumulative busy curve."""
    t = np.asarray(t_us, dtype=np.float64)
    if len(iv) == 0:
        return np.zeros(t.shape)
    dur = iv.end_us - iv.start_us
    before = np.concatenate([[0.0], np.cumsum(dur)])  # busy time before interval k
    k = np.searchsorted(iv.start_us, t, side="right") - 1
    kk = np.clip(k, 0, None)
    partial = np.clip(t - iv.start_us[kk], 0.0, dur[kk])
    return np.where(k >= 0, before[kk] + partial, 0.0)


def busy_fraction(iv: Intervals, edges_us: FloatArray) -> FloatArray:
    """Fraction of each bin [edges[i], edges[i+1]) that `iv` covers (exact)."""
    cum = covered_before(iv, edges_us)
    width = np.diff(edges_us)
    return np.diff(cum) / np.where(width > 0, width, np.nan)


def gaps(iv: Intervals) -> FloatArray:
    """Lengths of the idle gaps between consecutive intervals (µs)."""
    if len(iv) < 2:
        return np.zeros(0)
    return iv.start_us[1:] - iv.end_us[:-1]


def steps(iv: Intervals, max_gap_us: float, breaks_us: FloatArray | None = None) -> Intervals:
    """Join compute intervals into one interval per stage step.

    Kernel launches leave microsecond gaps inside one forward pass; a stage
    hands over to the next with a point-to-point transfer. Intervals are
    joined unless the gap between them is at least `max_gap_us` or holds one
    of `breaks_us` (start times of transfer kernels).
    """
    if len(iv) == 0:
        return iv
    split = gaps(iv) >= max_gap_us
    if breaks_us is not None and breaks_us.size:
        b = np.sort(breaks_us)
        lo = np.searchsorted(b, iv.end_us[:-1], side="left")
        hi = np.searchsorted(b, iv.start_us[1:], side="right")
        split |= hi > lo
    first = np.flatnonzero(np.concatenate([[True], split]))
    last = np.append(first[1:] - 1, len(iv) - 1)
    return Intervals(iv.start_us[first], iv.end_us[last])


@dataclass(frozen=True)
class Stagger:
    """Delay from a burst start on one stage to the next burst start on the following stage."""

    mean_us: float
    median_us: float
    n: int


def stagger(a: Intervals, b: Intervals, max_delay_us: float) -> Stagger | None:
    """Match each burst of `a` to the first burst of `b` starting at or after it.

    Delays longer than `max_delay_us` are not the same micro-batch (the next
    stage was idle, or this burst was the last one) and are left out.
    """
    if len(a) == 0 or len(b) == 0:
        return None
    k = np.searchsorted(b.start_us, a.start_us, side="left")
    ok = k < len(b)
    delay = b.start_us[np.clip(k, 0, len(b) - 1)] - a.start_us
    delay = delay[ok & (delay <= max_delay_us)]
    if delay.size == 0:
        return None
    return Stagger(float(np.mean(delay)), float(np.median(delay)), int(delay.size))
