"""Measurements of one window beyond the per-stage statistics, for the detector's Context.

Concurrency from power where SM activity has only an assumed level, the
collective wait judged against the job's measured idle draw, memory in use,
and whether an inferred pipeline is one of single GPUs. Pure functions of the
resampled grid and the learned levels.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.infer import InferredTopology
from bubblewatch.detect.jobs import (
    GpuWindow,
    collective_wait_finding,
    job_idle_levels,
    memory_in_use_b,
)
from bubblewatch.detect.levels import LEVEL_ASSUMED, SIGNAL_POWER, SIGNAL_SM, Levels, occupancy
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import Finding


def memory_used(w: GpuWindow) -> tuple[tuple[int, float], ...]:
    mem = memory_in_use_b(w)
    if mem is None:
        return ()
    return tuple((g, float(b)) for g, b in zip(w.gpus, mem.tolist(), strict=True) if np.isfinite(b))


def collective_wait(
    grid: Grid, window: GpuWindow, levels: Levels, opts: DetectOptions
) -> Finding | None:
    """The collective-wait finding, its waiting judged against the job's measured idle draw."""
    shared = job_idle_levels(levels)
    if shared is not levels:
        window = replace(window, occupancy=occupancy(grid, shared))
    return collective_wait_finding(window, shared, opts)


def power_concurrency(
    grid: Grid, levels: Levels, stages: tuple[tuple[int, ...], ...]
) -> float | None:
    """Concurrency from power, where SM activity has only an assumed level and a known limit."""
    sources = levels.compute_level_source
    if levels.signal != SIGNAL_SM or not sources or any(x != LEVEL_ASSUMED for x in sources):
        return None
    if levels.power_reference_w is None or levels.compute_power_w is None:
        return None
    occ = occupancy(grid, replace(levels, signal=SIGNAL_POWER))
    row = {g: k for k, g in enumerate(grid.gpus)}
    per_stage = [np.nanmean(occ[[row[g] for g in st]]) for st in stages]
    total = float(np.nansum(per_stage))
    return total if np.isfinite(total) else None


def one_gpu_stages(inferred: InferredTopology) -> bool:
    """An inferred pipeline of single GPUs (a layer split, or single GPUs that stagger): their
    turns may be shorter than power resolves (detect/level_range.py)."""
    return inferred.is_pipeline and all(len(g) == 1 for g in inferred.groups)
