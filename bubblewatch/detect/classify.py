"""The signatures of DESIGN.md section 6 as rules over window statistics.

Each rule returns a Finding (with confidence and the numbers that decided it)
or None; `classify` orders the findings so the primary one comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bubblewatch.detect.levels import SIGNAL_POWER, Levels
from bubblewatch.detect.options import DetectOptions
from bubblewatch.detect.stats import WindowStats
from bubblewatch.detect.types import EvidenceValue, Finding, LoadContext, Verdict


@dataclass(frozen=True)
class Context:
    """What the rules know besides the window statistics."""

    stats: WindowStats
    levels: Levels
    load: LoadContext
    options: DetectOptions
    topology_given: bool
    topology_confidence: float  # 1 when given, inference confidence otherwise


def score(x: float, zero_at: float, one_at: float) -> float:
    """Linear ramp from 0 (at zero_at) to 1 (at one_at), clipped; works either direction."""
    if one_at == zero_at:
        return 1.0 if x >= one_at else 0.0
    return float(np.clip((x - zero_at) / (one_at - zero_at), 0.0, 1.0))


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def load_active(load: LoadContext, options: DetectOptions) -> bool | None:
    if not load.known:
        return None
    return (load.running or 0.0) + (load.queued or 0.0) >= options.idle_load


def idle_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    top = float(np.max(s.occupancy))
    kb = float(np.mean(s.kernel_busy)) if s.kernel_busy is not None else None
    active = load_active(c.load, o)
    quiet_kernels = kb is None or kb < o.idle_kernel_busy
    if top >= o.idle_occupancy or active is True:
        return None
    if active is None and not quiet_kernels:
        return None
    conf = 0.6 + 0.2 * score(top, o.idle_occupancy, 0.0) + 0.2 * (active is False)
    if c.levels.signal == SIGNAL_POWER:
        conf -= 0.1
    return Finding(
        Verdict.IDLE,
        conf,
        "GPUs idle with no queued work: no bubble, nothing to fix",
        {"max_stage_occupancy_ratio": _r(top), "kernel_busy_ratio": _r(kb)},
    )


def not_pipeline_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    if s.pp_size == 1:
        conf = 0.95 if c.topology_given else 0.5 + 0.4 * c.topology_confidence
        return Finding(
            Verdict.NOT_PIPELINE,
            conf,
            f"one stage of {len(s.stages[0])} GPU(s): tensor or data parallel, no pipeline",
            {"pp_size": 1, "gpus": list(s.stages[0])},
        )
    if c.topology_given:
        # Decode lags are milliseconds, so a healthy pipeline can look in phase at NVML
        # rates: a topology the engine or the user gave is not overruled by that.
        return None
    if s.concurrency <= o.serialized_concurrency:
        return None  # work is conserved across the groups: serialized, not independent
    if c.topology_confidence < o.min_stagger_confidence:
        # No topology and no stagger to order the groups by: nothing shows a pipeline.
        return Finding(
            Verdict.NOT_PIPELINE,
            0.45 + 0.3 * score(c.topology_confidence, o.min_stagger_confidence, 0.0),
            f"{s.pp_size} GPU groups busy at once with no stagger between them: data "
            "parallel replicas or independent jobs (if this is a pipeline, give the topology)",
            {
                "groups": [list(g) for g in s.stages],
                "stage_zero_lag_correlation": _r(s.stage_zero_lag_correlation),
                "inferred_topology_confidence": _r(c.topology_confidence),
            },
        )
    return None


def straggler_findings(c: Context) -> list[Finding]:
    s, o = c.stats, c.options
    clocks = np.array([h.sm_clock_mhz if h.sm_clock_mhz is not None else np.nan for h in s.health])
    out = []
    for k, h in enumerate(s.health):
        others = np.delete(clocks, k)
        ref = float(np.nanmedian(others)) if np.isfinite(others).any() else float("nan")
        clock_ratio = h.sm_clock_mhz / ref if h.sm_clock_mhz is not None and ref > 0 else None
        throttled = h.throttle_fraction is not None and h.throttle_fraction >= o.throttle_fraction
        slow = clock_ratio is not None and clock_ratio < o.straggler_clock_ratio
        if not (throttled or slow):
            continue
        stage = next(i for i, st in enumerate(s.stages) if h.gpu in st)
        longest = stage == s.imbalanced_stage
        conf = 0.45 + 0.25 * throttled + 0.15 * slow + 0.15 * longest
        out.append(
            Finding(
                Verdict.STRAGGLER,
                min(conf, 0.95),
                f"GPU {h.gpu} (stage {stage}) runs slow"
                + (f" ({', '.join(h.throttle_reasons)})" if h.throttle_reasons else "")
                + ("; its stage is the longest" if longest else ""),
                {
                    "gpu": h.gpu,
                    "stage": stage,
                    "throttle_fraction": _r(h.throttle_fraction),
                    "throttle_reasons": list(h.throttle_reasons),
                    "sm_clock_mhz": _r(h.sm_clock_mhz, 0),
                    "clock_ratio": _r(clock_ratio),
                    "stage_is_longest": longest,
                },
                stage=stage,
                gpu=h.gpu,
            )
        )
    return out


def imbalance_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    if s.pp_size < 2 or s.imbalance_ratio < o.imbalance_ratio or s.imbalance_consistency < 0.6:
        return None
    conf = 0.4 + 0.35 * score(s.imbalance_ratio, o.imbalance_ratio, 2.0 * o.imbalance_ratio - 1)
    conf += 0.2 * score(s.imbalance_consistency, 0.6, 1.0)
    return Finding(
        Verdict.IMBALANCED,
        conf,
        f"stage {s.imbalanced_stage} is busiest at {s.imbalance_ratio:.2f}x the mean stage "
        "occupancy; the other stages wait on it",
        {
            "imbalanced_stage": s.imbalanced_stage,
            "imbalance_ratio": _r(s.imbalance_ratio),
            "consistency": _r(s.imbalance_consistency),
        },
        stage=s.imbalanced_stage,
    )


def serialized_finding(c: Context) -> tuple[Finding | None, bool | None]:
    """Serialized pipeline and whether too little work is the cause (load_limited)."""
    s, o = c.stats, c.options
    if s.pp_size < 2 or s.concurrency > o.serialized_concurrency:
        return None, None
    kb = float(np.mean(s.kernel_busy)) if s.kernel_busy is not None else None
    engaged = load_active(c.load, o)
    if engaged is None:
        engaged = (kb is not None and kb >= 0.5) or float(np.max(s.occupancy)) >= o.idle_occupancy
    if not engaged:
        return None, None
    load_limited: bool | None = None
    if c.load.running is not None:
        load_limited = c.load.running <= o.load_limited_running
    conf = 0.5 + 0.2 * score(s.concurrency, o.serialized_concurrency, 1.0)
    conf += 0.1 * score(s.concurrency_p90, 2.0, 1.2)
    rho = s.lag_rank_correlation
    if rho is not None:
        conf += 0.1 * score(rho, 0.0, 0.8)
    conf += 0.1 * (c.load.known)
    if c.levels.signal == SIGNAL_POWER:
        conf -= 0.15
    why = (
        "too few requests to fill the pipeline (inherent to PP at this load)"
        if load_limited
        else "under load: a configuration problem"
        if load_limited is False
        else "load unknown"
    )
    return (
        Finding(
            Verdict.SERIALIZED,
            conf,
            f"only one stage works at a time: stages sum to {s.concurrency:.2f} of {s.pp_size}; "
            + why,
            {
                "concurrency": _r(s.concurrency),
                "concurrency_p90": _r(s.concurrency_p90),
                "bubble_ratio": _r(s.bubble_ratio),
                "lag_rank_correlation": _r(rho),
                "load_limited": load_limited,
            },
        ),
        load_limited,
    )


def launch_bound_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    lbi = s.launch_bound_index
    if lbi is None or lbi < o.launch_bound_index or s.kernel_busy is None:
        return None
    kb = float(np.mean(s.kernel_busy))
    if kb < 0.6:
        return None
    serial = s.concurrency <= o.serialized_concurrency
    gaps = s.kernel_gap_ratio or 0.0
    if not serial and gaps < o.min_kernel_gap_ratio:
        # SMs idle while a kernel is always resident: NCCL spin in a partly empty
        # pipeline, not launch overhead.
        return None
    conf = 0.45 + 0.3 * score(lbi, o.launch_bound_index, 0.9) + 0.15 * score(kb, 0.6, 0.95)
    return Finding(
        Verdict.LAUNCH_BOUND,
        conf,
        f"kernels run {kb:.0%} of the time but SMs stay mostly empty (index {lbi:.2f}): "
        "launch overhead, CUDA graphs likely off",
        {
            "launch_bound_index": _r(lbi),
            "kernel_busy_ratio": _r(kb),
            "power_fraction": _r(s.power_fraction),
            "kernel_gap_ratio": _r(s.kernel_gap_ratio),
        },
    )


def healthy_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    if s.bubble_ratio > o.healthy_bubble_ratio:
        return None
    conf = 0.55 + 0.35 * score(s.bubble_ratio, o.healthy_bubble_ratio, 0.1)
    if c.levels.signal == SIGNAL_POWER:
        conf -= 0.1
    return Finding(
        Verdict.HEALTHY,
        conf,
        f"stages busy together: concurrency {s.concurrency:.2f} of {s.pp_size}",
        {"concurrency": _r(s.concurrency), "bubble_ratio": _r(s.bubble_ratio)},
    )


def classify(c: Context) -> tuple[list[Finding], bool | None]:
    """All findings that apply, primary first, and load_limited for a serialized pipeline."""
    idle = idle_finding(c)
    if idle is not None:
        return [idle], None
    notp = not_pipeline_finding(c)
    if notp is not None:
        return [notp], None
    stragglers = straggler_findings(c)
    imbalance = imbalance_finding(c)
    serial, load_limited = serialized_finding(c)
    launch = launch_bound_finding(c)
    healthy = healthy_finding(c)
    lead_stragglers = [f for f in stragglers if f.evidence.get("stage_is_longest")]
    other_stragglers = [f for f in stragglers if not f.evidence.get("stage_is_longest")]
    ordered: list[Finding | None]
    if lead_stragglers:
        # A throttled GPU whose stage is the longest explains the imbalance it causes.
        ordered = [*lead_stragglers, serial, launch, *other_stragglers]
    elif serial is not None:
        ordered = [serial, launch, imbalance, *stragglers]
    else:
        ordered = [imbalance, launch, *stragglers]
    findings = [f for f in ordered if f is not None]
    if not findings:
        findings = [healthy] if healthy is not None else [_underfilled(c)]
    return findings, load_limited if serial is not None else None


def _underfilled(c: Context) -> Finding:
    """Neither healthy nor one clear signature: the pipeline runs partly empty."""
    s = c.stats
    ev: dict[str, EvidenceValue] = {
        "concurrency": _r(s.concurrency),
        "bubble_ratio": _r(s.bubble_ratio),
    }
    return Finding(
        Verdict.SERIALIZED,
        0.4,
        f"pipeline partly empty: about {s.concurrency:.1f} of {s.pp_size} stages busy at once",
        ev,
    )
