"""The `training` facts: a job's layout, its schedule's bubble, and what would lower it.

Schema: `TRAINING` in bubblewatch.rules._schema_parts (re-exported by bubblewatch.rules.schema).

Pure: a function of the engine configuration (its `training` layout) and the
measured stage occupancies. The suggestions are the figures a rule needs to
render a fix in the framework's own flags: more micro-batches (4 per stage,
the rule of thumb that keeps the fill/drain bubble under 20 %), the micro or
global batch size that gives them, an interleaved schedule where the
framework has one, and Megatron's first/last stage layer counts that balance
measured stage times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bubblewatch.model.schedule import (
    ScheduleKind,
    bubble_ratio,
    expectation,
    resolve_schedule,
)
from bubblewatch.topology.engine_config import EngineConfig

MICRO_BATCHES_PER_STAGE = 4


def training_facts(
    engine: EngineConfig | None, occupancy: Sequence[float | None] = ()
) -> dict[str, Any]:
    """The `training` facts of an engine configuration (unknown unless it is a training job)."""
    lay = None if engine is None else engine.training
    if lay is None:
        return {"known": False, "pipeline": False, "suggest": {}}
    out: dict[str, Any] = {
        "known": True,
        "framework": lay.framework,
        "launcher": lay.launcher,
        "pipeline": lay.is_pipeline,
        "schedule": lay.schedule,
        "pp_size": lay.pp,
        "tp_size": lay.tp,
        "dp_size": lay.dp,
        "cp_size": lay.cp,
        "ep_size": lay.ep,
        "virtual_stages": lay.virtual_stages,
        "micro_batch_size": lay.micro_batch_size,
        "global_batch_size": lay.global_batch_size,
        "micro_batches": lay.micro_batches,
        "num_layers": lay.num_layers,
        "config_file": lay.config_file,
        "suggest": {},
    }
    schedule = resolve_schedule(lay.framework, lay.schedule, lay.pp, lay.virtual_stages)
    if schedule is not None:
        out["schedule_kind"] = schedule.kind.value
    m = lay.micro_batches
    if schedule is None or m is None:
        return out
    exp = expectation(schedule, lay.pp, m)
    out["expected_bubble_ratio"] = exp.bubble_ratio
    out["expected_formula"] = exp.formula
    if lay.is_pipeline:
        out["suggest"] = _suggest(lay, schedule.kind, schedule.virtual_stages, m, occupancy)
    return out


def _suggest(
    lay: Any, kind: ScheduleKind, v: int, m: int, occupancy: Sequence[float | None]
) -> dict[str, Any]:
    p = lay.pp
    s: dict[str, Any] = {}
    target = MICRO_BATCHES_PER_STAGE * p
    if kind is not ScheduleKind.ZERO_BUBBLE and m < target:
        s["micro_batches"] = target
        s["gradient_accumulation_steps"] = target
        s["bubble_ratio"] = bubble_ratio(kind, p, target, v)
        mbs, gbs = lay.micro_batch_size, lay.global_batch_size
        if mbs is not None:
            s["global_batch_size"] = target * mbs * lay.dp
        if lay.framework == "torchtitan" and mbs is not None:
            local = m * mbs  # local_batch_size = m x pipeline_parallel_microbatch_size
            if local % target == 0:
                s["micro_batch_size"] = local // target
        elif gbs is not None and gbs % (target * lay.dp) == 0:
            s["micro_batch_size"] = gbs // (target * lay.dp)
    if kind is ScheduleKind.FILL_DRAIN:
        chunks = _interleave(lay)
        if chunks is not None:
            s["virtual_stages"] = chunks
            s["bubble_ratio_interleaved"] = bubble_ratio(ScheduleKind.INTERLEAVED, p, m, chunks)
            if lay.num_layers is not None and lay.framework in ("megatron", "nemo"):
                s["layers_per_virtual_stage"] = lay.num_layers // p // chunks
    s.update(_rebalance(lay, occupancy))
    return s


def _interleave(lay: Any) -> int | None:
    """Model chunks per rank for the framework's interleaved schedule, if it has one."""
    if lay.framework == "torchtitan":
        return 2  # Interleaved1F1B's default stages per rank
    if lay.framework in ("megatron", "nemo"):
        layers = lay.num_layers
        if layers is None or layers % lay.pp or (layers // lay.pp) % 2:
            return None
        return 2
    return None  # DeepSpeed's pipeline engine has no interleaved schedule


def _rebalance(lay: Any, occupancy: Sequence[float | None]) -> dict[str, Any]:
    """Megatron's first/last stage layer counts that even out measured stage times.

    Per-layer cost of a stage is its busy share over its layers; stages get
    layers in inverse proportion. Megatron splits the middle stages evenly,
    so the first and last counts must leave a multiple of pp - 2.
    """
    p, layers = lay.pp, lay.num_layers
    if lay.framework != "megatron" or layers is None or len(occupancy) != p or p < 2:
        return {}
    occ = [o for o in occupancy if o is not None and o > 0]
    if len(occ) != p:
        return {}
    first = lay.first_stage_layers
    last = lay.last_stage_layers
    middle_total = layers - (first or 0) - (last or 0)
    unset = (first is None) + (last is None) + max(p - 2, 0)
    even = middle_total / unset if unset else 0.0
    current = [first or even, *([even] * (p - 2)), last or even]
    speed = [n / o for n, o in zip(current, occ, strict=True)]
    ideal = [layers * x / sum(speed) for x in speed]
    best: tuple[float, int, int] | None = None
    for f in range(1, layers):
        for last_n in range(1, layers - f + 1):
            rest = layers - f - last_n
            if p > 2 and (rest <= 0 or rest % (p - 2)):
                continue
            if p == 2 and rest != 0:
                continue
            err = abs(f - ideal[0]) + abs(last_n - ideal[-1])
            if best is None or err < best[0]:
                best = (err, f, last_n)
    if best is None or (math.isclose(best[0], 0.0) and first is None and last is None):
        return {}
    return {"first_stage_layers": best[1], "last_stage_layers": best[2]}
