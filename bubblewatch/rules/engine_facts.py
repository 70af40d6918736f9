"""The `engine` facts: a serving engine's configuration, flag table and live-update reach."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bubblewatch.topology.engine import EngineConfig


def engine_facts(engine: EngineConfig | None) -> dict[str, Any]:
    if engine is None:
        return {"known": False, "argv_known": False, "flags": {}, "env": {}}
    from bubblewatch.topology.endpoint import base_url
    from bubblewatch.topology.flagtable import release_spelling, table_for

    table = table_for(engine.name, engine.version)
    accepted = (
        {} if table is None else {n: s.deprecated for n, s in table.flags.items() if not s.rejected}
    )
    micro: int | None = engine.pp_max_micro_batch_size
    if micro is None and engine.max_running_requests is not None and engine.pp_size > 0:
        micro = max(engine.max_running_requests // engine.pp_size, 1)
    part = engine.layer_partition
    slots = None
    if engine.name == "sglang" and engine.pp_size > 1:
        slots = engine.pp_size + (engine.pp_async_batch_depth or 0)
    limits = [] if engine.max_running_requests is None else [engine.max_running_requests]
    if slots is not None and micro is not None:
        limits.append(slots * micro)
    cap_flag = None
    if engine.name == "sglang":
        cap_flag = release_spelling(table, "--pp-max-micro-batch-size")
    return {
        "known": True,
        "argv_known": bool(engine.argv),
        "name": engine.name,
        "version": engine.version,
        "pp_size": engine.pp_size,
        "tp_size": engine.tp_size,
        "ep_size": engine.ep_size,
        "pp_async_batch_depth": engine.pp_async_batch_depth,
        "pp_max_micro_batch_size": engine.pp_max_micro_batch_size,
        "micro_batch_size": micro,
        "micro_batch_slots": slots,
        "requests_ceiling": min(limits) if limits else None,
        "micro_batch_cap_flag": cap_flag,
        "cuda_graph": engine.cuda_graph,
        "cudagraph_mode": getattr(engine, "cudagraph_mode", None),
        "max_running_requests": engine.max_running_requests,
        "layer_partition": None if part is None else list(part),
        "num_layers": None if part is None else sum(part),
        "flags": {k: "true" if v is True else str(v) for k, v in engine.flags.items()},
        "env": dict(engine.env),
        "version_known": engine.version is not None,
        "flag_table": None if table is None else table.table_version,
        "accepted_flags": accepted,
        "graphs_off_by": list(engine.graphs_off_by),
        "problems": list(engine.problems),
        "graph_bs_flag": _graph_bs_flag(engine.name, accepted),
        "live_update": bool(
            engine.name == "sglang"
            and table is not None
            and cap_flag is not None
            and base_url(engine) is not None
        ),
        "base_url": base_url(engine),
    }


def _graph_bs_flag(engine: str, accepted: Mapping[str, bool]) -> str | None:
    """SGLang's decode CUDA-graph batch-size flag as this version spells it."""
    if engine != "sglang":
        return None
    for flag in ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"):
        if flag in accepted and not accepted[flag]:
            return flag
    if not accepted:
        return "--cuda-graph-max-bs (--cuda-graph-max-bs-decode from 0.5.14)"
    return None
