"""Topology inference: in-phase groups (TP/DP), and a pipeline only on pipeline evidence.

Without a topology, GPUs that work in phase form groups (groups.py). One group
is a data- or tensor-parallel job. Several groups are called pipeline stages
only when (a) their shape is coherent (equal group sizes, the groups holding
every GPU that takes part) and (b) their stagger is significant against a null
model of the same series misaligned (stagger.py). GPUs that work in turn,
their busy periods never overlapping beyond chance (turns.py: one process
split layer-wise, a pipeline with one micro-batch whose turns are faster than
a sample), are a pipeline of one GPU per stage in their turn order, even when
they rise and fall together. Otherwise they are replicas in phase or
independent jobs, and no pipeline verdict may follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.groups import Groups, in_phase_groups
from bubblewatch.detect.lag import LagMemo, fluctuations, positions_from_lags
from bubblewatch.detect.stagger import StaggerTest, stagger_test
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.turns import TurnTest, turn_taking_test

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class InferredTopology:
    """A proposed stage order, whether it is a pipeline, and how that was decided."""

    stages: tuple[tuple[int, ...], ...]  # groups (pipeline order when a pipeline), idle GPUs last
    confidence: float  # of the pipeline (0 when not one); of the grouping for one group
    ordered_by_lag: bool
    group_correlation: float | None  # mean zero-lag correlation inside groups
    is_pipeline: bool = False
    groups: tuple[tuple[int, ...], ...] = ()
    idle_gpus: tuple[int, ...] = ()
    coherent: bool = False
    stagger: StaggerTest | None = None
    reason: str = ""
    turns: TurnTest | None = None  # set when turn-taking made (or was tried for) the pipeline
    kind: str = ""  # "layer_split" when the pipeline is GPUs taking turns
    order_source: str = ""  # what ordered a layer split's stages (see _layer_order)


def infer_topology(
    gpus: tuple[int, ...],
    occ: FloatArray,
    step_s: float,
    options: DetectOptions,
    *,
    power: FloatArray | None = None,
    kernel_busy: FloatArray | None = None,
    memory_b: FloatArray | None = None,
    lags: LagMemo | None = None,
) -> InferredTopology:
    """Group GPUs by in-phase work; call them a pipeline only on pipeline evidence.

    The evidence is a stagger between groups, or GPUs taking turns (which,
    where single GPUs also stagger, orders them). `lags` keeps the groups'
    pairwise lags for the window's statistics.
    """
    out = _infer_groups(
        gpus,
        occ,
        step_s,
        options,
        power=power,
        kernel_busy=kernel_busy,
        memory_b=memory_b,
        lags=lags if lags is not None else LagMemo(),
    )
    if out.is_pipeline and any(len(g) > 1 for g in out.groups):
        return out  # stages of several GPUs: not one process taking turns
    # utilization.gpu where the file has it: its busy shares add up across GPUs as time
    # does (occupancy may be learned per GPU, or read from a power that averages over 1 s).
    busy = kernel_busy if kernel_busy is not None and np.isfinite(kernel_busy).any() else occ
    return _turn_taking(gpus, busy, step_s, options, out)


def _turn_taking(
    gpus: tuple[int, ...],
    busy: FloatArray,
    step_s: float,
    options: DetectOptions,
    out: InferredTopology,
) -> InferredTopology:
    """`out` made a layer-split pipeline when its working GPUs take turns, else `out`."""
    working = sorted(g for grp in out.groups for g in grp)
    if len(working) < 2:
        return out
    index = {g: k for k, g in enumerate(gpus)}
    test = turn_taking_test(
        busy[[index[g] for g in working]],
        step_s,
        trend_window_s=options.trend_window_s,
        n_surrogates=options.stagger_surrogates,
        alpha=options.stagger_alpha,
        min_effect=options.turn_min_effect,
        max_busy_sum=options.turn_max_busy_sum,
    )
    if not test.significant:
        return out if out.is_pipeline else replace(out, turns=test)
    # A stagger between single GPUs that take turns is the same pipeline; the turns order it
    # (the lag of fluctuations faster than a sample is not the order of the stages).
    order, source = _layer_order(tuple(working[k] for k in test.order), test.ordered, options)
    stages = tuple((g,) for g in order)
    effect = float(np.clip((test.excess - options.turn_min_effect) / 0.3, 0.0, 1.0))
    return replace(
        out,
        stages=(*stages, *((g,) for g in out.idle_gpus)),
        groups=stages,
        coherent=True,
        confidence=0.4 + 0.3 * effect + 0.2 * float(test.ordered),
        ordered_by_lag=test.ordered or options.layer_order_resolved,
        is_pipeline=True,
        turns=test,
        kind="layer_split",
        order_source=source,
        reason=f"layer-split model parallelism: {test.reason}",
    )


def _layer_order(
    turns: tuple[int, ...], ordered: bool, options: DetectOptions
) -> tuple[tuple[int, ...], str]:
    """The stage order of a layer split: where the layers are, the turns, or GPU order.

    Where discovery resolved the layer blocks (tensor split and memory) they decide, and
    the evidence says whether the turns agree; else the turns where bursts of work ordered
    them; else discovery's device order; else the GPUs' own order.
    """
    placed = options.layer_order if sorted(options.layer_order) == sorted(turns) else ()
    if placed and options.layer_order_resolved:
        if not ordered:
            return placed, "layer placement"
        return placed, f"layer placement; the turns {'agree' if placed == turns else 'differ'}"
    if ordered:
        return turns, "turns"
    if placed:
        return placed, "device order"
    return turns, "gpu index"


def _infer_groups(
    gpus: tuple[int, ...],
    occ: FloatArray,
    step_s: float,
    options: DetectOptions,
    *,
    power: FloatArray | None = None,
    kernel_busy: FloatArray | None = None,
    memory_b: FloatArray | None = None,
    lags: LagMemo,
) -> InferredTopology:
    """Group GPUs by in-phase work; call the groups a pipeline only on their stagger."""
    signals: list[FloatArray] = [occ]
    if power is not None and np.isfinite(power).any():
        signals.append(power)
    grp = in_phase_groups(
        gpus,
        signals,
        occupancy=occ,
        kernel_busy=kernel_busy,
        memory_b=memory_b,
        step_s=step_s,
        options=options,
    )
    index = {g: k for k, g in enumerate(gpus)}
    group_corr = _inner_correlation(grp, index)
    idle_tail = tuple((g,) for g in grp.idle_gpus)
    base = InferredTopology(
        stages=(),
        confidence=0.0,
        ordered_by_lag=False,
        group_correlation=group_corr,
        groups=grp.groups,
        idle_gpus=grp.idle_gpus,
        coherent=grp.coherent,
    )
    if len(grp.groups) <= 1:
        conf = float(np.clip(group_corr if group_corr is not None else 0.5, 0.0, 1.0))
        reason = (
            "every GPU that works is in phase with the others: data or tensor parallel"
            if grp.groups and len(grp.groups[0]) > 1
            else "one GPU works"
            if grp.groups
            else "no GPU works"
        )
        return replace(base, stages=(*grp.groups, *idle_tail), confidence=conf, reason=reason)
    fl = fluctuations(occ, step_s, options.trend_window_s)
    members = [np.array([index[g] for g in group]) for group in grp.groups]
    signals_g = np.stack([fl[m].mean(axis=0) for m in members])
    test = stagger_test(
        signals_g,
        step_s,
        max_lag_s=options.max_lag_s,
        n_surrogates=options.stagger_surrogates,
        alpha=options.stagger_alpha,
        min_effect=options.stagger_min_effect,
    )
    order, ordered = _order_by_lag(signals_g, grp.groups, step_s, options, lags)
    stages = tuple(grp.groups[k] for k in order)
    if not grp.coherent:
        reason = (
            f"{len(grp.groups)} groups of unequal size "
            f"({', '.join(str(len(g)) for g in grp.groups)} GPUs): independent jobs or "
            "replicas, not the stages of one pipeline"
        )
        return replace(
            base, stages=(*stages, *idle_tail), ordered_by_lag=ordered, stagger=test, reason=reason
        )
    if not test.significant:
        reason = (
            f"{len(grp.groups)} groups with no stagger beyond chance (stagger "
            f"{test.statistic:.2f}, {test.excess:.2f} above chance, p = {test.p_value:.3f}): "
            "replicas in phase or independent jobs"
        )
        return replace(
            base, stages=(*stages, *idle_tail), ordered_by_lag=ordered, stagger=test, reason=reason
        )
    effect = float(np.clip((test.excess - options.stagger_min_effect) / 0.3, 0.0, 1.0))
    conf = 0.4 + 0.3 * effect + 0.2 * float(ordered)
    reason = (
        f"{len(grp.groups)} equal groups staggered beyond chance (stagger {test.statistic:.2f}, "
        f"{test.excess:.2f} above chance, "
        f"p = {test.p_value:.3f})"
    )
    return replace(
        base,
        stages=(*stages, *idle_tail),
        confidence=conf,
        ordered_by_lag=ordered,
        is_pipeline=True,
        stagger=test,
        reason=reason,
    )


def _inner_correlation(grp: Groups, index: dict[int, int]) -> float | None:
    inner = []
    for group in grp.groups:
        rows = [index[g] for g in group]
        if len(rows) > 1:
            sub = grp.correlation[np.ix_(rows, rows)]
            inner.append(sub[np.triu_indices(len(rows), 1)])
    return float(np.mean(np.concatenate(inner))) if inner else None


def _order_by_lag(
    signals: FloatArray,
    groups: Sequence[tuple[int, ...]],
    step_s: float,
    options: DetectOptions,
    memo: LagMemo,
) -> tuple[list[int], bool]:
    """Group order by least-squares lag offsets; groups with no lag keep GPU order, last."""
    lags = memo.pairwise_lags(signals, step_s, options.max_lag_s, options.min_lag_correlation)
    pos = positions_from_lags(lags)
    known = np.isfinite(pos)
    first_gpu = np.array([min(g) for g in groups], dtype=np.float64)
    order = np.lexsort((first_gpu, np.where(known, pos, np.inf)))
    spread = np.diff(np.sort(pos[known]))
    ordered = bool(known.sum() >= 2 and spread.size and np.all(spread > 0.25 * step_s))
    return [int(k) for k in order], ordered
