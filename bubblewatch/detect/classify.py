"""The verdict rules in order: idle, the job findings, not_pipeline, then the pipeline signatures.

Each rule returns a Finding (with confidence and the numbers that decided it)
or None; `classify` orders the findings so the primary one comes first. The
pipeline signatures live in pipeline_findings.py and are only asked for with
pipeline evidence.
"""

from __future__ import annotations

import numpy as np

from bubblewatch.detect.context import (
    Context,
    as_number,
    load_active,
    rounded,
    score,
)
from bubblewatch.detect.jobs import GIB, gpu_list
from bubblewatch.detect.levels import SIGNAL_POWER
from bubblewatch.detect.pipeline_findings import pipeline_findings
from bubblewatch.detect.types import EvidenceValue, Finding, Verdict

__all__ = ["classify"]


def idle_finding(c: Context) -> Finding | None:
    """Idle: no kernel ran on any GPU all window, or stages (almost) never compute unloaded.

    `utilization.gpu` at ~0% on every GPU over the window is idle whatever the
    power: a card holding a model, or starting up, draws 50-120 W with nothing
    running, which power alone, without a limit to judge it by, reads as work.
    """
    s, o = c.stats, c.options
    top = float(np.max(s.occupancy))
    kb = float(np.mean(s.kernel_busy)) if s.kernel_busy is not None else None
    active = load_active(c.load, o)
    quiet_kernels = kb is None or kb < o.idle_kernel_busy
    # SM activity that shows work outweighs a utilisation counter that says none.
    no_kernels = (
        s.kernel_busy_top_gpu is not None
        and s.kernel_busy_top_gpu <= o.no_kernel_busy
        and (c.levels.signal == SIGNAL_POWER or top < o.idle_occupancy)
    )
    if active is True:
        return None
    if no_kernels:
        conf = 0.8 + 0.1 * (active is False)
    else:
        if top >= o.idle_occupancy or (active is None and not quiet_kernels):
            return None
        conf = 0.6 + 0.2 * score(top, o.idle_occupancy, 0.0) + 0.2 * (active is False)
        if c.levels.signal == SIGNAL_POWER:
            conf -= 0.1
    ev: dict[str, EvidenceValue] = {
        "max_stage_occupancy_ratio": rounded(top),
        "kernel_busy_ratio": rounded(kb),
        "kernel_busy_top_gpu_ratio": rounded(s.kernel_busy_top_gpu),
    }
    what = "GPUs idle"
    if c.memory_used_b:
        # Memory in use tells a model held idle (capacity reserved, unused) from an empty card.
        floor_b = o.loaded_memory_gib * GIB
        loaded = [g for g, b in c.memory_used_b if b >= floor_b]
        empty = [g for g, b in c.memory_used_b if b < floor_b]
        held = [b for _, b in c.memory_used_b if b >= floor_b]
        ev["loaded_gpus"] = loaded
        ev["empty_gpus"] = empty
        ev["memory_used_gib"] = rounded(max(held) / GIB, 1) if held else 0.0
        if loaded and not empty:
            what = f"GPUs idle with a model loaded (up to {max(held) / GIB:.0f} GiB in use)"
        elif loaded:
            what = (
                f"GPUs idle: GPU(s) {gpu_list(loaded)} hold a model (up to "
                f"{max(held) / GIB:.0f} GiB), GPU(s) {gpu_list(empty)} are empty"
            )
        else:
            what = "GPUs idle and empty (no model in memory)"
    return Finding(Verdict.IDLE, conf, f"{what} with no queued work: no bubble, nothing to fix", ev)


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
        "stagger": None if test is None else rounded(test.statistic),
        "stagger_p_value": None if test is None else rounded(test.p_value, 4),
        "group_correlation": rounded(inf.group_correlation),
    }
    one = len(inf.groups) <= 1
    conf = 0.8 if one else 0.6 + 0.2 * float(test is not None and test.p_value > 0.2)
    hint = "" if one else " (if this is a pipeline, give the topology)"
    return Finding(Verdict.NOT_PIPELINE, conf, f"not a pipeline: {inf.reason}{hint}", ev)


def classify(c: Context) -> tuple[list[Finding], bool | None]:
    """All findings that apply, primary first, and load_limited for a serialized pipeline.

    Pipeline verdicts need pipeline evidence (`c.pipeline`); without it a
    job-level problem (collective wait, then underfed) leads and not_pipeline,
    the job's shape, follows: the verdict names what the first recommendation
    acts on. In a pipeline a collective wait over most of the window leads.
    """
    idle = idle_finding(c)
    if idle is not None:
        return [idle], None
    cw = c.collective_wait
    cw_share = as_number(cw.evidence.get("share_ratio")) if cw is not None else 0.0
    cw_first = cw is not None and cw_share >= c.options.cw_primary_share
    notp = not_pipeline_finding(c)
    if notp is not None or not c.pipeline:
        if notp is None:
            notp = Finding(Verdict.NOT_PIPELINE, 0.5, "not a pipeline: no pipeline evidence")
        ordered_np = [cw, c.underfed, notp]
        return [f for f in ordered_np if f is not None], None
    findings, load_limited = pipeline_findings(c)
    if cw is not None:
        findings = [cw, *findings] if cw_first else [*findings, cw]
    return findings, load_limited
