"""The pipeline signatures (docs/detection.md): straggler, imbalance, serialized, launch-bound,
healthy, and a training pipeline below its schedule. Said only on pipeline evidence (classify.py
decides when).
"""

from __future__ import annotations

import numpy as np

from bubblewatch.detect.context import (
    Context,
    InFlight,
    in_flight,
    load_active,
    load_limited,
    rounded,
    running_requests,
    score,
)
from bubblewatch.detect.health import GpuHealth
from bubblewatch.detect.levels import POWER_LEVEL_UNCERTAINTY, SIGNAL_POWER
from bubblewatch.detect.reductions import nanmedian
from bubblewatch.detect.schedule_judge import describe
from bubblewatch.detect.stats import WindowStats
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import EvidenceValue, Finding, Verdict

_SlowGpu = tuple[GpuHealth, int, bool, bool, float | None]  # health, stage, throttled, slow, ratio


def slow_gpus(s: WindowStats, o: DetectOptions) -> list[_SlowGpu]:
    """GPUs with throttle reasons set or clocks below the others', with their stage."""
    clocks = np.array([h.sm_clock_mhz if h.sm_clock_mhz is not None else np.nan for h in s.health])
    out: list[_SlowGpu] = []
    for k, h in enumerate(s.health):
        others = np.delete(clocks, k)
        ref = nanmedian(others) if np.isfinite(others).any() else float("nan")
        clock_ratio = h.sm_clock_mhz / ref if h.sm_clock_mhz is not None and ref > 0 else None
        throttled = h.throttle_fraction is not None and h.throttle_fraction >= o.throttle_fraction
        slow = clock_ratio is not None and clock_ratio < o.straggler_clock_ratio
        if throttled or slow:
            stage = next(i for i, st in enumerate(s.stages) if h.gpu in st)
            out.append((h, stage, throttled, slow, clock_ratio))
    return out


def straggler_findings(c: Context) -> list[Finding]:
    s = c.stats
    out = []
    for h, stage, throttled, slow, clock_ratio in slow_gpus(s, c.options):
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
                    "throttle_fraction": rounded(h.throttle_fraction),
                    "throttle_reasons": list(h.throttle_reasons),
                    "sm_clock_mhz": rounded(h.sm_clock_mhz, 0),
                    "clock_ratio": rounded(clock_ratio),
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
            "imbalance_ratio": rounded(s.imbalance_ratio),
            "consistency": rounded(s.imbalance_consistency),
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
    decided_by = c.levels.signal
    if k.estimate + o.serialized_sigmas * sigma > o.serialized_rule_out_two:
        # Two micro-batches in flight are not ruled out: the SM level is only assumed. Power
        # against the card's known limit decides, or nothing does.
        if c.power_concurrency is None:
            return None, None
        kp = c.power_concurrency / k.working_level
        sp = max(kp * POWER_LEVEL_UNCERTAINTY, o.min_in_flight_uncertainty)
        limit = min(o.serialized_max_in_flight, 1.0 + o.serialized_sigmas * sp)
        if kp > limit or kp + o.serialized_sigmas * sp > o.serialized_rule_out_two:
            return None, None
        k, sigma, decided_by = InFlight(kp, sp, k.working_level), sp, SIGNAL_POWER
    kb = float(np.mean(s.kernel_busy)) if s.kernel_busy is not None else None
    engaged = load_active(c.load, o)
    if engaged is None:
        engaged = (kb is not None and kb >= 0.5) or float(np.max(s.occupancy)) >= o.idle_occupancy
    if not engaged:
        return None, None
    limited = load_limited(c.load, k.estimate, o)
    conf = 0.5 + 0.2 * score(k.estimate, limit, 1.0)
    conf += 0.1 * score(s.concurrency_p90, 2.0, 1.2)
    conf -= 0.1 * score(sigma, 0.15, 0.4)
    rho = s.lag_rank_correlation
    if rho is not None:
        conf += 0.1 * score(rho, 0.0, 0.8)
    conf += 0.1 * (c.load.known)
    if decided_by == SIGNAL_POWER:
        conf -= 0.15
    why = (
        "too few requests to fill the pipeline (inherent to PP at this load)"
        if limited
        else "under load: a configuration problem"
        if limited is False
        else "load unknown"
    )
    return (
        Finding(
            Verdict.SERIALIZED,
            conf,
            f"only one stage works at a time: stages sum to {s.concurrency:.2f} of {s.pp_size}; "
            + why,
            {
                "concurrency": rounded(s.concurrency),
                "concurrency_p90": rounded(s.concurrency_p90),
                "bubble_ratio": rounded(s.bubble_ratio),
                "micro_batches_in_flight": rounded(k.estimate),
                "decided_by": decided_by,
                "in_flight_uncertainty": rounded(sigma),
                "serialized_limit": rounded(limit),
                "lag_rank_correlation": rounded(rho),
                "load_limited": limited,
                "running_requests": rounded(running_requests(c.load, k.estimate)),
                "micro_batch_requests": rounded(c.load.micro_batch),
            },
        ),
        limited,
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
            "launch_bound_index": rounded(lbi),
            "kernel_busy_ratio": rounded(kb),
            "power_fraction": rounded(s.power_fraction),
            "kernel_gap_ratio": rounded(s.kernel_gap_ratio),
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
            "kernel_busy_ratio": rounded(float(np.mean(kb))),
            "kernel_gap_ratio": rounded(gaps),
            "power_fraction": rounded(s.power_fraction),
        },
    )


def healthy_finding(c: Context) -> Finding | None:
    s, o, j = c.stats, c.options, c.judgement
    as_good = j is not None and j.as_good
    if s.bubble_ratio > o.healthy_bubble_ratio and not as_good:
        return None
    conf = 0.55 + 0.35 * score(s.bubble_ratio, o.healthy_bubble_ratio, 0.1)
    if as_good:
        conf = max(conf, 0.75)
    if c.levels.signal == SIGNAL_POWER:
        conf -= 0.1
    ev: dict[str, EvidenceValue] = {
        "concurrency": rounded(s.concurrency),
        "bubble_ratio": rounded(s.bubble_ratio),
    }
    summary = f"stages busy together: concurrency {s.concurrency:.2f} of {s.pp_size}"
    if c.schedule is not None and j is not None:
        ev.update(_schedule_evidence(c))
        summary += (
            f"; bubble {j.measured_bubble_ratio:.0%} against {j.expected_bubble_ratio:.0%} that "
            f"{_schedule_words(c)} allows"
            + (" (as good as its schedule allows)" if as_good else "")
        )
    return Finding(Verdict.HEALTHY, conf, summary, ev)


def below_schedule_finding(c: Context) -> Finding | None:
    """A training pipeline whose measured bubble exceeds its schedule's, and what costs it."""
    j = c.judgement
    if j is None or j.as_good:
        return None
    over = j.excess_ratio - j.tolerance_ratio
    resolved = c.steps is not None and c.steps.period is not None
    conf = 0.5 + 0.3 * score(over, 0.0, 0.1) + 0.1 * resolved
    if c.levels.signal == SIGNAL_POWER:
        conf -= 0.1
    why = describe(j)
    return Finding(
        Verdict.BELOW_SCHEDULE,
        conf,
        f"bubble {j.measured_bubble_ratio:.0%} against {j.expected_bubble_ratio:.0%} that "
        f"{_schedule_words(c)} allows: {why}",
        _schedule_evidence(c),
        stage=j.cause_stage,
    )


def _schedule_words(c: Context) -> str:
    sch = c.schedule
    if sch is None:
        return "the schedule"
    v = f", {sch.virtual_stages} chunks per rank" if sch.kind == "interleaved" else ""
    return f"{sch.label} with m={sch.micro_batches}{v}"


def _schedule_evidence(c: Context) -> dict[str, EvidenceValue]:
    j = c.judgement
    if j is None:
        return {}
    steps = c.steps
    period = None if steps is None or steps.period is None else steps.period.period_s
    return {
        "schedule_judgement": "as_good" if j.as_good else "below",
        "measured_bubble_ratio": rounded(j.measured_bubble_ratio),
        "expected_bubble_ratio": rounded(j.expected_bubble_ratio),
        "expected_formula": j.formula,
        "schedule_excess_ratio": rounded(j.excess_ratio),
        "tolerance_ratio": rounded(j.tolerance_ratio),
        "imbalance_bubble_ratio": rounded(j.imbalance_bubble_ratio),
        "imbalance_excess_ratio": rounded(j.imbalance_ratio),
        "host_wait_ratio": rounded(j.host_wait_ratio),
        "communication_excess_ratio": rounded(j.communication_ratio),
        "excess_cause": j.cause,
        "excess_stage": j.cause_stage,
        "step_period_s": rounded(period, 4),
    }


def pipeline_findings(c: Context) -> tuple[list[Finding], bool | None]:
    stragglers = straggler_findings(c)
    imbalance = imbalance_finding(c)
    serial, limited = serialized_finding(c)
    launch = launch_bound_finding(c)
    healthy = healthy_finding(c)
    below = below_schedule_finding(c)
    lead_stragglers = [f for f in stragglers if f.evidence.get("stage_is_longest")]
    other_stragglers = [f for f in stragglers if not f.evidence.get("stage_is_longest")]
    ordered: list[Finding | None]
    if lead_stragglers:
        # A throttled GPU whose stage is the longest explains the imbalance it causes.
        ordered = [*lead_stragglers, serial, launch, *other_stragglers, below]
    elif serial is not None:
        ordered = [serial, launch, imbalance, *stragglers, below]
    else:
        ordered = [imbalance, launch, *stragglers, below]
    findings = [f for f in ordered if f is not None]
    if not findings:
        findings = [healthy] if healthy is not None else [_underfilled(c)]
    return findings, limited if serial is not None else None


def _underfilled(c: Context) -> Finding:
    """Neither healthy nor one clear signature: the pipeline runs partly empty."""
    s = c.stats
    ev: dict[str, EvidenceValue] = {
        "concurrency": rounded(s.concurrency),
        "bubble_ratio": rounded(s.bubble_ratio),
    }
    return Finding(
        Verdict.SERIALIZED,
        0.4,
        f"pipeline partly empty: about {s.concurrency:.1f} of {s.pp_size} stages busy at once",
        ev,
    )
