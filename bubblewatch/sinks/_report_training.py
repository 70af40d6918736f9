"""The report's training-steps section: step period, measured vs expected bubble, waves."""

from __future__ import annotations

from collections.abc import Mapping

from bubblewatch.detect.types import Diagnosis, EvidenceValue


def _n(v: EvidenceValue) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def training_lines(d: Diagnosis) -> list[str]:
    """Lines on a training pipeline judged against its schedule (none without a schedule)."""
    ev: Mapping[str, EvidenceValue] = d.evidence
    measured = _n(ev.get("measured_bubble_ratio"))
    expected = _n(ev.get("expected_bubble_ratio"))
    if measured is None or expected is None:
        return []
    rows: list[tuple[str, str]] = []
    period = _n(ev.get("step_period_s"))
    if period is not None:
        rows.append(
            ("step period", f"{period:.3f} s ({d.window_s / period:.0f} steps in the window)")
        )
    else:
        rows.append(("step period", "not resolved at this sampling interval"))
    rows.append(("measured bubble", f"{measured:.0%} of stage-time"))
    rows.append(("the schedule allows", f"{expected:.0%}: {ev.get('expected_formula') or '-'}"))
    excess = _n(ev.get("schedule_excess_ratio")) or 0.0
    if ev.get("schedule_judgement") == "as_good":
        rows.append(("judgement", "as good as its schedule allows"))
    else:
        cause = str(ev.get("excess_cause") or "unexplained").replace("_", " ")
        stage = ev.get("excess_stage")
        where = f" (stage {stage})" if stage is not None else ""
        rows.append(("judgement", f"{excess:+.0%} above its schedule: {cause}{where}"))
    imb = _n(ev.get("imbalance_bubble_ratio"))
    if imb is not None:
        rows.append(("with the measured stage times", f"{imb:.0%} (imbalance alone)"))
    order = ev.get("wave_order")
    if isinstance(order, list) and order:
        rho = _n(ev.get("wave_rank_correlation"))
        tail = "" if rho is None else f" (Spearman vs stage index {rho:.2f})"
        rows.append(("waves pass the stages", " -> ".join(str(s) for s in order) + tail))
    busy = [(s.stage, _n(s.extra.get("busy_s_per_step"))) for s in d.stages]
    if busy and all(b is not None for _, b in busy):
        per_stage = ", ".join(f"{st}: {b:.3f} s" for st, b in busy if b is not None)
        rows.append(("busy per step by stage", per_stage))
    width = max(len(k) for k, _ in rows)
    return ["", "training steps:", *(f"  {k:<{width}}  {v}" for k, v in rows)]
