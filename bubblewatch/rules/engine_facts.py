"""The `engine` facts: a serving engine's configuration, flag table and live-update reach."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from bubblewatch.sources.engine_state import LiveState
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.vllm_batches import InFlight, batches_in_flight


def _vllm_flight(engine: EngineConfig) -> InFlight | None:
    """vLLM's batch queue for the release and flags (topology.vllm_batches); None if unknown."""
    if engine.name != "vllm" or engine.version is None:
        return None
    v2 = engine.env.get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower()
    v2_env = {"1": True, "0": False}.get(v2)  # vLLM reads it as bool(int(value))
    return batches_in_flight(
        engine.version, engine.pp_size, async_flag=engine.async_scheduling, v2_env=v2_env
    )


def engine_facts(engine: EngineConfig | None, live: LiveState | None = None) -> dict[str, Any]:
    """The engine's facts; with `live`, the settings its scheduler holds now (engine_state)."""
    if engine is None:
        return {"known": False, "argv_known": False, "flags": {}, "env": {}}
    from bubblewatch.topology.endpoint import base_url
    from bubblewatch.topology.flagtable import release_spelling, table_for
    from bubblewatch.topology.versions import normalise_version

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
    joined = _join_live(engine, live)
    # What limits the running requests, from the values in force (live over the command line).
    depth = joined.get("pp_async_batch_depth", engine.pp_async_batch_depth)
    micro = joined.get("micro_batch_size", micro)
    running = joined.get("max_running_requests", engine.max_running_requests)
    slots = None
    if engine.name == "sglang" and engine.pp_size > 1:
        slots = engine.pp_size + (depth or 0)
    limits = [] if running is None else [running]
    if slots is not None and micro is not None:
        limits.append(slots * micro)
    flight = _vllm_flight(engine)
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
        "graph_bs_flag": _graph_bs_flag(engine.name, accepted),
        "live_update": bool(
            engine.name == "sglang"
            and table is not None
            and cap_flag is not None
            and base_url(engine) is not None
        ),
        "base_url": base_url(engine),
        **joined,
    }


def _join_live(engine: EngineConfig, live: LiveState | None) -> dict[str, Any]:
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
    if depth is not None and engine.name == "sglang":
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
