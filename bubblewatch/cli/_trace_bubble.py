"""The exact per-step bubble of a training profiler trace, as `analyze` and `compare` show it.

The figures come from `meta.kineto.pipeline_steps`
(bubblewatch.sources.kineto.pipeline_steps); a telemetry recording of the
same run has only the detector's estimate (`evidence.bubble_ratio`), which
`compare` puts beside the trace's exact figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bubblewatch.detect.types import Diagnosis


def pipeline_steps(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kineto = meta.get("kineto")
    steps = kineto.get("pipeline_steps") if isinstance(kineto, Mapping) else None
    return steps if isinstance(steps, Mapping) else None


def step_lines(meta: Mapping[str, Any], expected: float | None = None) -> list[str]:
    """Lines for a terminal: bubble per step and per stage, or nothing without steps."""
    steps = pipeline_steps(meta)
    if steps is None:
        return []
    rows = steps["steps"]
    out = [
        "",
        f"training steps (profiler trace, exact): {len(rows)} steps over {steps['pp_size']} "
        f"stages, median step {steps['step_s_median'] * 1e3:.1f} ms",
        f"  bubble: mean {steps['bubble_ratio_mean']:.1%}, median "
        f"{steps['bubble_ratio_median']:.1%}"
        + ("" if expected is None else f" (the schedule allows {expected:.1%})"),
    ]
    busy = steps["stage_busy_ratio_mean"]
    wait = steps["stage_p2p_wait_ratio_mean"]
    for s, (b, w) in enumerate(zip(busy, wait, strict=True)):
        out.append(f"  stage {s}: busy {b:.1%}, waiting on P2P {w:.1%}")
    for st in rows[:8]:
        out.append(
            f"  step {st['step']}: {st['duration_s'] * 1e3:.1f} ms, bubble {st['bubble_ratio']:.1%}"
        )
    if len(rows) > 8:
        out.append(f"  ... {len(rows) - 8} more steps (--json lists them all)")
    return out


def trace_vs_telemetry(
    before: tuple[Diagnosis, Mapping[str, Any]], after: tuple[Diagnosis, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """When one side is a profiler trace with steps and the other telemetry: both bubbles."""
    sides = [(d, pipeline_steps(m)) for d, m in (before, after)]
    traced = [i for i, (_, s) in enumerate(sides) if s is not None]
    if len(traced) != 1:
        return None
    exact = sides[traced[0]][1]
    assert exact is not None
    estimate = sides[1 - traced[0]][0].evidence.get("bubble_ratio")
    est = float(estimate) if isinstance(estimate, (int, float)) else None
    exact_ratio = float(exact["bubble_ratio_mean"])
    return {
        "trace_side": ("before", "after")[traced[0]],
        "trace_bubble_ratio": exact_ratio,
        "telemetry_bubble_ratio": est,
        "difference": None if est is None else round(est - exact_ratio, 4),
    }


def trace_vs_telemetry_lines(cmp: Mapping[str, Any] | None) -> list[str]:
    if cmp is None:
        return []
    est = cmp["telemetry_bubble_ratio"]
    text = "unknown" if est is None else f"{est:.1%} ({cmp['difference']:+.1%})"
    return [
        "",
        f"bubble, same run: profiler trace ({cmp['trace_side']}) {cmp['trace_bubble_ratio']:.1%} "
        f"exact; telemetry estimate {text}",
    ]
