"""Topology inference: group GPUs that move together (TP), order the groups by lag (PP)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse import csgraph

from bubblewatch.detect.lag import fluctuations, pairwise_lags, positions_from_lags
from bubblewatch.detect.options import DetectOptions

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class InferredTopology:
    """A proposed stage order with how sure it is (0..1) and how it was reached."""

    stages: tuple[tuple[int, ...], ...]
    confidence: float
    ordered_by_lag: bool
    group_correlation: float | None  # mean zero-lag correlation inside groups


def zero_lag_correlation(fluct: FloatArray) -> FloatArray:
    """Pearson correlation matrix of rows; flat rows correlate 0 with everything."""
    z = fluct - fluct.mean(axis=1, keepdims=True)
    norm = np.sqrt((z * z).sum(axis=1))
    flat = norm <= 1e-9
    z = z / np.where(flat, 1.0, norm)[:, None]
    c = z @ z.T
    c[flat, :] = 0.0
    c[:, flat] = 0.0
    np.fill_diagonal(c, 1.0)
    return np.asarray(c, dtype=np.float64)


def infer_topology(
    gpus: tuple[int, ...], occ: FloatArray, step_s: float, options: DetectOptions
) -> InferredTopology:
    """Group GPUs into TP groups by zero-lag correlation, then order groups by lag."""
    fl = fluctuations(occ, step_s, options.trend_window_s)
    corr = zero_lag_correlation(fl)
    means = np.nanmean(np.where(np.isfinite(occ), occ, np.nan), axis=1)
    means = np.where(np.isfinite(means), means, 0.0)
    close = np.abs(means[:, None] - means[None, :]) <= 0.05 + 0.2 * np.maximum(
        means[:, None], means[None, :]
    )
    adj = (corr >= options.tp_group_correlation) & close
    n_groups, label = csgraph.connected_components(adj.astype(np.int8), directed=False)
    members = [np.flatnonzero(label == k) for k in range(n_groups)]
    inner = [corr[np.ix_(m, m)][np.triu_indices(m.size, 1)] for m in members if m.size > 1]
    group_corr = float(np.mean(np.concatenate(inner))) if inner else None
    if n_groups == 1:
        conf = group_corr if group_corr is not None else 0.5
        return InferredTopology((tuple(gpus),), float(np.clip(conf, 0, 1)), False, group_corr)
    signals = np.stack([fl[m].mean(axis=0) for m in members])
    lags = pairwise_lags(signals, step_s, options.max_lag_s, options.min_lag_correlation)
    pos = positions_from_lags(lags)
    known = np.isfinite(pos)
    # Groups with no usable lag keep their GPU order, after the ordered ones.
    first_gpu = np.array([m.min() for m in members], dtype=np.float64)
    order = np.lexsort((first_gpu, np.where(known, pos, np.inf)))
    stages = tuple(tuple(gpus[i] for i in members[k]) for k in order)
    if known.sum() < 2:
        return InferredTopology(stages, 0.0, False, group_corr)
    sig = np.isfinite(lags.lag_s)
    np.fill_diagonal(sig, False)
    coverage = float(known.mean())
    strength = float(np.clip(lags.peak[sig].mean(), 0.0, 1.0)) if sig.any() else 0.0
    # Distinct positions: lags that all read ~0 cannot order anything.
    spread = np.diff(np.sort(pos[known]))
    distinct = float(np.mean(spread > 0.25 * step_s)) if spread.size else 0.0
    return InferredTopology(stages, coverage * strength * distinct, True, group_corr)
