"""The `engine` facts: a serving engine's configuration, flag table and live-update reach."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bubblewatch.topology.engine_config import EngineConfig

if TYPE_CHECKING:  # the engines' tables are imported only where an engine is known
    from bubblewatch.engines.base import Engine, InFlight
    from bubblewatch.sources.engine_state import LiveState


def _flight(known: Engine | None, engine: EngineConfig) -> InFlight | None:
    """The engine's batch queue for the release and flags; None if unknown or slots decide."""
    if known is None or engine.version is None:
        return None
    return known.scheduler.batches_in_flight(
        engine.version,
        engine.pp_size,
        async_flag=engine.async_scheduling,
        v2_env=known.scheduler.runner_env(engine.env),
    )


def engine_facts(engine: EngineConfig | None, live: LiveState | None = None) -> dict[str, Any]:
    """The engine's facts; with `live`, the settings its scheduler holds now (engine_state)."""
    if engine is None:
        return {"known": False, "argv_known": False, "flags": {}, "env": {}}
    from bubblewatch import engines
    from bubblewatch.engines.flagtable import release_spelling, table_for
    from bubblewatch.engines.versions import normalise_version
    from bubblewatch.topology.endpoint import base_url

    said = None if live is None else normalise_version(live.version)
    if engine.version is None and said is not None:
        # A server behind --api-key hides its version from the probe; the read-back says it.
        engine = replace(engine, version=said)
    table = table_for(engine.name, engine.version)
    accepted = (
        {} if table is None else {n: s.deprecated for n, s in table.flags.items() if not s.rejected}
    )
    micro: int | None = engine.pp_max_micro_batch_size
    if micro is None and engine.max_running_requests is not None and engine.pp_size > 0:
        micro = max(engine.max_running_requests // engine.pp_size, 1)
    part = engine.layer_partition
    joined = _join_live(engine, live, engines.get(engine.name))
    # What limits the running requests, from the values in force (live over the command line).
    depth = joined.get("pp_async_batch_depth", engine.pp_async_batch_depth)
    micro = joined.get("micro_batch_size", micro)
    running = joined.get("max_running_requests", engine.max_running_requests)
    known = engines.get(engine.name)
    slots = None
    if known is not None:
        slots = known.scheduler.micro_batch_slots(engine.pp_size, depth or 0)
    limits = [] if running is None else [running]
    if slots is not None and micro is not None:
        limits.append(slots * micro)
    flight = _flight(known, engine)
    cap_flag = None
    if known is not None and known.fixes.cap_flag is not None:
        cap_flag = release_spelling(table, known.fixes.cap_flag)
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
        "batches_in_flight": None if flight is None else flight.batches,
        "async_scheduling": None if flight is None else flight.async_scheduling,
        "batches_why": None if flight is None else flight.why,
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
        "graph_bs_flag": _graph_bs_flag(known, accepted),
        "live_update": bool(
            known is not None
            and known.live.set_path is not None
            and table is not None
            and cap_flag is not None
            and base_url(engine) is not None
        ),
        "base_url": base_url(engine),
        **joined,
    }


def _join_live(
    engine: EngineConfig, live: LiveState | None, known: Engine | None
) -> dict[str, Any]:
    """The live values over the command line's, and where each came from ("live", "cmdline").

    The scheduler always reports its cap, the default filled in: the cap counts
    as set (`pp_max_micro_batch_size` not null) only when the command line set
    it or it differs from the default for the live max_running_requests.
    """
    source = {k: "cmdline" for k in ("pp_max_micro_batch_size", "micro_batch_size",
                                      "max_running_requests", "pp_async_batch_depth")}  # fmt: skip
    out: dict[str, Any] = {"live_known": live is not None, "settings_source": source}
    if live is None:
        return out
    out["live_cap_key"] = live.cap_key
    running = live.get("max_running_requests")
    if running is not None and live.schedulers <= 1:  # per scheduler: one replica's limit
        out["max_running_requests"], source["max_running_requests"] = running, "live"
    else:
        running = engine.max_running_requests
    depth = live.get("pp_async_batch_depth")
    if depth is not None and known is not None and known.scheduler.async_depth:
        out["pp_async_batch_depth"], source["pp_async_batch_depth"] = depth, "live"
    cap = live.get("pp_max_micro_batch_size")
    if cap is not None:
        out["micro_batch_size"], source["micro_batch_size"] = cap, "live"
        default = None if running is None else max(running // max(engine.pp_size, 1), 1)
        if engine.pp_max_micro_batch_size is not None or cap != default:
            out["pp_max_micro_batch_size"] = cap
            source["pp_max_micro_batch_size"] = "live"
    elif engine.pp_max_micro_batch_size is None and source["max_running_requests"] == "live":
        out["micro_batch_size"] = max(int(running or 0) // max(engine.pp_size, 1), 1)
        source["micro_batch_size"] = "live"
    return out


def _graph_bs_flag(known: Engine | None, accepted: Mapping[str, bool]) -> str | None:
    """The engine's decode CUDA-graph batch-size flag as this version spells it (SGLang's)."""
    if known is None or not known.fixes.graph_bs_flags:
        return None
    for flag in known.fixes.graph_bs_flags:
        if flag in accepted and not accepted[flag]:
            return flag
    if not accepted:
        return known.fixes.graph_bs_unknown
    return None
