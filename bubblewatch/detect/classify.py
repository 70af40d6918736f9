"""The signatures of DESIGN.md section 6 as rules over window statistics.

Each rule returns a Finding (with confidence and the numbers that decided it)
or None; `classify` orders the findings so the primary one comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bubblewatch.detect.infer import InferredTopology
from bubblewatch.detect.levels import SIGNAL_POWER, Levels
from bubblewatch.detect.options import DetectOptions
from bubblewatch.detect.schedule import PipelineSchedule
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
    pipeline: bool = True  # pipeline evidence: a topology of 2+ stages, or a significant stagger
    inferred: InferredTopology | None = None
    collective_wait: Finding | None = None
    underfed: Finding | None = None
    schedule: PipelineSchedule | None = None


@dataclass(frozen=True)
class InFlight:
    """Micro-batches in flight: estimate, one standard deviation, and the working level used."""

    estimate: float
    sigma: float
    working_level: float


def in_flight(c: Context) -> InFlight:
    """Concurrency over the stages' working level, with time and level uncertainty."""
    s = c.stats
    wl = s.working_level
    level = float(np.mean(wl)) if wl is not None and wl.size else 1.0
    sigma_conc = float(
        np.hypot(s.concurrency_sigma_time, s.concurrency * c.levels.uncertainty_ratio)
    )
    return InFlight(s.concurrency / level, sigma_conc / level, level)


def score(x: float, zero_at: float, one_at: float) -> float:
    """Linear ramp from 0 (at zero_at) to 1 (at one_at), clipped; works either direction."""
    if one_at == zero_at:
        return 1.0 if x >= one_at else 0.0
    return float(np.clip((x - zero_at) / (one_at - zero_at), 0.0, 1.0))


def _num(x: EvidenceValue) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0.0


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
    """No pipeline evidence: one stage given, GPUs in phase, or groups without a real stagger."""
    s = c.stats
    if c.topology_given:
        if s.pp_size != 1:
            return None
        return Finding(
            Verdict.NOT_PIPELINE,
            0.95,
            f"one stage of {len(s.stages[0])} GPU(s): tensor or data parallel, no pipeline",
            {"pp_size": 1, "gpus": list(s.stages[0])},
        )
    inf = c.inferred
    if inf is None or inf.is_pipeline:
        return None
    test = inf.stagger
    ev: dict[str, EvidenceValue] = {
        "groups": [list(g) for g in inf.groups],
        "idle_gpus": list(inf.idle_gpus),
        "coherent_shape": inf.coherent,
        "stagger": None if test is None else _r(test.statistic),
        "stagger_p_value": None if test is None else _r(test.p_value, 4),
        "group_correlation": _r(inf.group_correlation),
    }
    one = len(inf.groups) <= 1
    conf = 0.8 if one else 0.6 + 0.2 * float(test is not None and test.p_value > 0.2)
    hint = "" if one else " (if this is a pipeline, give the topology)"
    return Finding(Verdict.NOT_PIPELINE, conf, f"not a pipeline: {inf.reason}{hint}", ev)


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
    k = in_flight(c)
    sigma = max(k.sigma, o.min_in_flight_uncertainty)
    limit = min(o.serialized_max_in_flight, 1.0 + o.serialized_sigmas * sigma)
    if s.pp_size < 2 or k.estimate > limit:
        return None, None
    if k.estimate + o.serialized_sigmas * sigma > o.serialized_rule_out_two:
        return None, None  # two micro-batches in flight are not ruled out: too uncertain
    kb = float(np.mean(s.kernel_busy)) if s.kernel_busy is not None else None
    engaged = load_active(c.load, o)
    if engaged is None:
        engaged = (kb is not None and kb >= 0.5) or float(np.max(s.occupancy)) >= o.idle_occupancy
    if not engaged:
        return None, None
    load_limited: bool | None = None
    if c.load.running is not None:
        load_limited = c.load.running <= o.load_limited_running
    conf = 0.5 + 0.2 * score(k.estimate, limit, 1.0)
    conf += 0.1 * score(s.concurrency_p90, 2.0, 1.2)
    conf -= 0.1 * score(sigma, 0.15, 0.4)
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
                "micro_batches_in_flight": _r(k.estimate),
                "in_flight_uncertainty": _r(sigma),
                "serialized_limit": _r(limit),
                "lag_rank_correlation": _r(rho),
                "load_limited": load_limited,
            },
        ),
        load_limited,
    )


def launch_bound_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    lbi = s.launch_bound_index
    if lbi is None and c.levels.signal == SIGNAL_POWER:
        return _launch_bound_from_gaps(c)
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


def _launch_bound_from_gaps(c: Context) -> Finding | None:
    """Power and utilization.gpu only: every stage under load shows gaps between kernels.

    Spinning ranks read 100%, so a pipeline whose every stage stays well under
    100% while it has work is waiting on kernel launches (CUDA graphs off).
    """
    s, o = c.stats, c.options
    if s.kernel_busy is None:
        return None
    kb = s.kernel_busy
    engaged = load_active(c.load, o)
    if engaged is None:
        engaged = float(np.max(s.occupancy)) >= o.idle_occupancy
    if not engaged or float(np.max(kb)) > o.power_launch_max_kernel_busy:
        return None
    if float(np.mean(kb)) < 0.5:
        return None  # mostly no kernels at all: starved, not launch-bound
    gaps = float(np.mean(1.0 - kb))
    conf = 0.45 + 0.3 * score(gaps, 1.0 - o.power_launch_max_kernel_busy, 0.3)
    return Finding(
        Verdict.LAUNCH_BOUND,
        conf,
        f"every stage shows gaps between kernels under load (utilization.gpu "
        f"{float(np.mean(kb)):.0%}, where spinning ranks would read 100%): launch overhead, "
        "CUDA graphs likely off",
        {
            "launch_bound_index": None,
            "kernel_busy_ratio": _r(float(np.mean(kb))),
            "kernel_gap_ratio": _r(gaps),
            "power_fraction": _r(s.power_fraction),
        },
    )


def healthy_finding(c: Context) -> Finding | None:
    s, o = c.stats, c.options
    if s.bubble_ratio > o.healthy_bubble_ratio:
        return None
    conf = 0.55 + 0.35 * score(s.bubble_ratio, o.healthy_bubble_ratio, 0.1)
    if c.levels.signal == SIGNAL_POWER:
        conf -= 0.1
    ev: dict[str, EvidenceValue] = {
        "concurrency": _r(s.concurrency),
        "bubble_ratio": _r(s.bubble_ratio),
    }
    summary = f"stages busy together: concurrency {s.concurrency:.2f} of {s.pp_size}"
    if c.schedule is not None:
        allowed = c.schedule.bubble_ratio(s.pp_size)
        efficiency = (1.0 - s.bubble_ratio) / max(1.0 - allowed, 1e-9)
        ev["expected_bubble_ratio"] = _r(allowed)
        ev["schedule_efficiency_ratio"] = _r(efficiency)
        summary += (
            f"; bubble {s.bubble_ratio:.0%} against {allowed:.0%} that {c.schedule.kind} with "
            f"{c.schedule.micro_batches} micro-batches allows"
            + (" (as good as the schedule allows)" if efficiency >= 0.9 else "")
        )
    return Finding(Verdict.HEALTHY, conf, summary, ev)


def classify(c: Context) -> tuple[list[Finding], bool | None]:
    """All findings that apply, primary first, and load_limited for a serialized pipeline.

    Pipeline verdicts need pipeline evidence (`c.pipeline`); without it the
    answer is not_pipeline with the job-level findings (collective wait,
    underfed). A collective wait over most of the window leads either way.
    """
    idle = idle_finding(c)
    if idle is not None:
        return [idle], None
    cw = c.collective_wait
    cw_share = _num(cw.evidence.get("share_ratio")) if cw is not None else 0.0
    cw_first = cw is not None and cw_share >= c.options.cw_primary_share
    notp = not_pipeline_finding(c)
    if notp is not None or not c.pipeline:
        if notp is None:
            notp = Finding(Verdict.NOT_PIPELINE, 0.5, "not a pipeline: no pipeline evidence")
        ordered_np = [cw if cw_first else None, c.underfed, notp, None if cw_first else cw]
        return [f for f in ordered_np if f is not None], None
    findings, load_limited = _pipeline_findings(c)
    if cw is not None:
        findings = [cw, *findings] if cw_first else [*findings, cw]
    return findings, load_limited


def _pipeline_findings(c: Context) -> tuple[list[Finding], bool | None]:
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
