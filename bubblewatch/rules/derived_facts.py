"""The `derived` facts: figures computed from the engine, stage, evidence and load facts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def derive(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The `derived` facts: figures computed from the engine, stage, evidence and load facts."""
    engine = raw["engine"]
    stages = raw["stages"]
    pp = engine.get("pp_size") or raw["evidence"].get("pp_size") or len(stages) or None
    conc = num(raw["evidence"].get("concurrency"))
    running = raw["load"]["running"]
    gain = None
    if pp and conc is not None and conc > 0:
        fill = float(min(pp, max(running, 1.0))) if running is not None else float(pp)
        gain = fill / conc
    shares = [s["time_share_ratio"] for s in stages]
    share_txt = (
        ",".join(f"{100 * s:.0f}%" for s in shares) if shares and None not in shares else None
    )
    per_mb = None
    cap = None
    peak = None
    if running is not None:
        # Measured where the engine's gauge counts one micro-batch (SGLang with PP).
        per_mb = num(raw["evidence"].get("micro_batch_requests"))
        if per_mb is None and conc is not None:
            per_mb = running / max(conc, 1.0)
        # Sized for the peak the engine will see, never below what runs and waits now.
        queued = raw["load"].get("queued") or 0.0
        now = running + queued
        if queued >= 1.0 and engine.get("requests_ceiling"):
            # A request waits only once the limits are full: the ceiling runs.
            now = max(now, engine["requests_ceiling"] + queued)
        peak = max(now, raw["load"].get("peak") or 0.0)
        if pp:
            cap = max(math.ceil(peak / pp - 1e-9), 1)
    slots = engine.get("micro_batch_slots")
    cap_now = engine.get("pp_max_micro_batch_size")
    cap_depth_one = None
    if cap_now is not None and peak is not None and pp:
        # Depth 1 leaves pp + 1 slots: the cap that still holds the peak there.
        cap_depth_one = max(cap_now, math.ceil(peak / (pp + 1) - 1e-9))
    allowed = num(engine.get("pp_size")) if (engine.get("pp_size") or 0) > 1 else None
    if allowed is None:
        allowed = num(raw["evidence"].get("micro_batches_allowed"))
    in_flight = num(raw["evidence"].get("micro_batches_in_flight"))
    return {
        "micro_batches_allowed": allowed,
        "in_flight_ratio": None if allowed is None or in_flight is None else in_flight / allowed,
        "fill_gain_ratio": gain,
        "requests_per_micro_batch": per_mb,
        "micro_batch_cap_suggested": cap,
        "requests_peak": peak,
        "requests_ceiling_suggested": None if cap is None or not slots else slots * cap,
        "max_running_suggested": None if peak is None else max(math.ceil(peak - 1e-9), 1),
        "micro_batch_cap_depth_one": cap_depth_one,
        "layer_partition_suggested": _balanced_partition(
            engine.get("layer_partition"), [s["occupancy_ratio"] for s in stages]
        ),
        "stage_time_shares": share_txt,
    }


def _balanced_partition(current: list[int] | None, occupancy: list[float | None]) -> str | None:
    """Layers per stage so every stage takes the same time, from measured per-layer cost.

    Cost per layer of stage s is occupancy_s / layers_s; stages then get layers
    in inverse proportion to that cost (largest-remainder rounding, at least 1).
    """
    if not current or len(current) != len(occupancy) or any(o is None for o in occupancy):
        return None
    occ = [float(o) for o in occupancy if o is not None]
    if any(o <= 0 for o in occ) or any(n <= 0 for n in current):
        return None
    total = sum(current)
    speed = [n / o for n, o in zip(current, occ, strict=True)]
    ideal = [total * s / sum(speed) for s in speed]
    out = [max(1, math.floor(x)) for x in ideal]
    order = sorted(range(len(ideal)), key=lambda i: ideal[i] - math.floor(ideal[i]), reverse=True)
    i = 0
    while sum(out) < total:
        out[order[i % len(order)]] += 1
        i += 1
    while sum(out) > total:
        j = max(range(len(out)), key=lambda k: out[k] - ideal[k])
        out[j] -= 1
    return ",".join(str(n) for n in out)


def num(v: Any) -> float | None:
    """A finite int or float as a float; None for anything else (bools, NaN, inf, text)."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return None if math.isnan(f) or math.isinf(f) else f
