"""GPUs that work in phase: the tensor- or data-parallel groups of a job, found on noisy data.

Two GPUs are linked when the zero-lag correlation of their fluctuations
(slow trend removed) is significant against a null model built from the same
pair (the same circular cross-correlation read at offsets far from zero:
the pair misaligned; or is so strong, >= 0.9, that a periodic job whose
misaligned copies also correlate still counts), is not a trifle, is not
lopsided (one GPU leading the other), and nothing contradicts it: their
occupancy levels are alike and their memory in use is equal. Linked GPUs form
groups (connected components). Occupancy and power are both tried; either
signal may link a pair (DP ranks at 10 Hz correlate ~0.3-0.5 in SM activity
but ~0.9 in power). GPUs that do nothing (no kernels, no occupancy) take no
part: a host may run one job on some of its GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.lag import average_down, fluctuations, pair_correlations
from bubblewatch.detect.thresholds import DetectOptions

FloatArray = npt.NDArray[np.float64]
_GIB = 1024.0**3
_MAX_POINTS = 4096
_ASYM_LAGS = 3


@dataclass(frozen=True)
class Groups:
    """In-phase groups of the GPUs that take part, and what linked them."""

    groups: tuple[tuple[int, ...], ...]  # GPU indices, in GPU order
    idle_gpus: tuple[int, ...]
    correlation: FloatArray  # (n, n) zero-lag correlation, the stronger signal per pair
    z_score: FloatArray  # (n, n) the same against its pair's misaligned null

    @property
    def coherent(self) -> bool:
        """Equal group sizes, and the groups hold every GPU that takes part."""
        sizes = {len(g) for g in self.groups}
        return len(self.groups) >= 2 and len(sizes) == 1


def in_phase_groups(
    gpus: tuple[int, ...],
    signals: Sequence[FloatArray],
    *,
    occupancy: FloatArray,
    kernel_busy: FloatArray | None,
    memory_b: FloatArray | None,
    step_s: float,
    options: DetectOptions,
) -> Groups:
    """Group `gpus` (rows of every array) by in-phase work; see the module docstring."""
    n = len(gpus)
    mean_occ = _row_means(occupancy)
    mean_kb = _row_means(kernel_busy) if kernel_busy is not None else np.full(n, np.nan)
    idle = (mean_occ < options.idle_occupancy) & ~(mean_kb >= options.idle_kernel_busy)
    corr = np.zeros((n, n))
    z = np.zeros((n, n))
    linked = np.zeros((n, n), dtype=bool)
    for sig in signals:
        c, zz, asym = _significance(fluctuations(sig, step_s, options.group_trend_window_s), step_s)
        # In phase: correlated at zero lag beyond chance, and not led one way (a pipeline's
        # neighbouring stages correlate too, but one leads: the coupling is lopsided).
        ok = (zz >= options.group_z) | (c >= options.group_strong_correlation)
        ok &= (c >= options.group_min_correlation) & (np.abs(asym) < options.group_max_asymmetry_z)
        linked |= ok
        better = zz > z
        corr = np.where(better, c, corr)
        z = np.where(better, zz, z)
    close = np.abs(mean_occ[:, None] - mean_occ[None, :]) <= options.group_level_tolerance + (
        options.group_level_share * np.maximum(mean_occ[:, None], mean_occ[None, :])
    )
    same_memory = np.ones((n, n), dtype=bool)
    if memory_b is not None:
        mem = _row_means(memory_b)
        known = np.isfinite(mem)
        diff = np.abs(mem[:, None] - mem[None, :])
        tol = np.maximum(
            options.group_memory_gib * _GIB, 0.05 * np.fmax(mem[:, None], mem[None, :])
        )
        same_memory = ~(known[:, None] & known[None, :]) | (diff <= tol)
    link = linked & close & same_memory & ~idle[:, None] & ~idle[None, :]
    np.fill_diagonal(link, False)
    active = np.flatnonzero(~idle)
    label = _components(link)
    found: dict[int, list[int]] = {}
    for k in active.tolist():
        found.setdefault(int(label[k]), []).append(gpus[k])
    groups = tuple(sorted((tuple(v) for v in found.values()), key=lambda g: g[0]))
    return Groups(groups, tuple(gpus[k] for k in np.flatnonzero(idle).tolist()), corr, z)


def _components(link: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """A label per node of the undirected graph `link`: the lowest node it is connected to."""
    n = link.shape[0]
    label = np.full(n, -1, dtype=np.int64)
    sym = link | link.T
    for k in range(n):
        if label[k] >= 0:
            continue
        reach = np.zeros(n, dtype=bool)
        reach[k] = True
        frontier = reach.copy()
        while frontier.any():
            frontier = sym[frontier].any(axis=0) & ~reach
            reach |= frontier
        label[reach] = k
    return label


def _row_means(a: FloatArray) -> FloatArray:
    ok = np.isfinite(a)
    cnt = ok.sum(axis=1)
    return np.where(cnt > 0, np.where(ok, a, 0.0).sum(axis=1) / np.maximum(cnt, 1), np.nan)


def _significance(fl: FloatArray, step_s: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Zero-lag correlation of rows, its size against the pair misaligned, and its lopsidedness.

    The null spread of a pair is read from its own circular cross-correlation at
    offsets at least `far` steps from zero (a few seconds, or a tenth of the
    window): same series, no alignment. Lopsidedness is the sum of the
    correlations at lags +1..+3 steps minus that at -1..-3, in units of the
    same difference's spread at misaligned offsets: ~0 for GPUs in phase,
    large when one leads the other (neighbouring pipeline stages).
    """
    x = np.where(np.isfinite(fl), fl, 0.0)
    n_rows, n = x.shape
    x, k = average_down(x, _MAX_POINTS)  # long windows: the same coupling, bounded cost
    step_s, n = step_s * k, x.shape[1]
    x = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=1))
    flat = norm <= 1e-12
    x = x / np.where(flat, 1.0, norm)[:, None]
    far = int(min(max(8, round(5.0 / max(step_s, 1e-9))), n // 10))
    offsets = np.arange(far, n - far) if n - 2 * far >= 8 else np.arange(1, n)
    offsets = offsets[:: max(1, offsets.size // 256)]
    lags = np.arange(1, _ASYM_LAGS + 1)
    zero, spread, asym = (
        np.zeros((n_rows, n_rows)),
        np.ones((n_rows, n_rows)),
        np.zeros((n_rows, n_rows)),
    )
    first, second = np.triu_indices(n_rows, 1)
    if first.size:
        # Pair (j, i) is pair (i, j) read backwards: c_ji(L) = c_ij(-L).
        upper = pair_correlations(x)
        c = np.concatenate([upper, upper[:, (-np.arange(n)) % n]])
        i, j = np.concatenate([first, second]), np.concatenate([second, first])
        zero[i, j] = c[:, 0]
        null = c[:, offsets]
        spread[i, j] = np.sqrt(np.mean(null * null, axis=1))
        lop = c[:, lags].sum(axis=1) - c[:, (-lags) % n].sum(axis=1)
        lop_null = c[:, (offsets[:, None] + lags) % n].sum(axis=2) - c[
            :, (offsets[:, None] - lags) % n
        ].sum(axis=2)
        asym[i, j] = lop / np.maximum(np.sqrt(np.mean(lop_null * lop_null, axis=1)), 1e-9)
    z = zero / np.maximum(spread, 1e-6)
    bad = flat[:, None] | flat[None, :]
    zero = np.where(bad, 0.0, zero)
    z = np.where(bad, 0.0, z)
    asym = np.where(bad, 0.0, asym)
    np.fill_diagonal(zero, 1.0)
    np.fill_diagonal(z, np.inf)
    np.fill_diagonal(asym, 0.0)
    return (
        np.asarray(zero, dtype=np.float64),
        np.asarray(z, dtype=np.float64),
        np.asarray(asym, dtype=np.float64),
    )
