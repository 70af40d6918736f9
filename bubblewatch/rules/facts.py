"""Facts: the one namespace rules see, built from a diagnosis and engine configuration.

Pure: a function of its arguments. Every value is coerced to the type the
schema gives it (ints stay ints, measured figures are doubles, NaN is null),
so expressions behave the same whatever produced the facts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.rules.errors import FactsError
from bubblewatch.rules.schema import (
    FACTS_VERSION,
    SCHEMA,
    FieldType,
    ListOf,
    MapOf,
    Scalar,
    Struct,
)
from bubblewatch.rules.training_facts import training_facts
from bubblewatch.topology.engine import EngineConfig

log = logging.getLogger(__name__)
_warned: set[str] = set()


@dataclass(frozen=True)
class Facts:
    """Facts for one window: `data` is plain JSON-like values, shaped by the schema.

    `argv` is the engine's redacted command line: fixes are rendered onto it,
    but it is not a fact rules can test (flags are, parsed, in `engine.flags`).
    """

    data: Mapping[str, Any]
    argv: tuple[str, ...] = ()

    @property
    def window_s(self) -> float:
        return float(self.data["diagnosis"]["window_s"])

    def get(self, path: str) -> Any:
        """Value at a dotted path (`engine.pp_size`); KeyError if absent."""
        v: Any = self.data
        for part in path.split("."):
            v = v[part]
        return v

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)


def build_facts(
    diagnosis: Diagnosis,
    engine: EngineConfig | None,
    topology: Topology | None,
    *,
    gpus: Sequence[GpuInfo] = (),
    held_s: Mapping[str, float] | None = None,
) -> Facts:
    """Facts from the detector's answer, the engine configuration, topology and GPU identity."""
    ev = diagnosis.evidence
    stage_of = {g: st.stage for st in diagnosis.stages for g in st.gpus}
    occ = [_num(st.occupancy_ratio) for st in diagnosis.stages]
    occ_sum = sum(o for o in occ if o is not None)
    stages = []
    for st, o in zip(diagnosis.stages, occ, strict=True):
        d = {
            "stage": st.stage,
            "gpus": list(st.gpus),
            "occupancy_ratio": o,
            "sm_active_ratio": st.sm_active_ratio,
            "kernel_busy_ratio": st.kernel_busy_ratio,
            "power_w": st.power_w,
            "idle_power_w": st.idle_power_w,
            "spin_ratio": st.spin_ratio,
            "lag_s": st.lag_s,
            "bubble_energy_j": st.bubble_energy_j,
            "time_share_ratio": None if o is None or occ_sum <= 0 else o / occ_sum,
        }
        stages.append(d)
    running = _num(ev.get("running_requests"))
    queued = _num(ev.get("queued_requests"))
    raw: dict[str, Any] = {
        "version": FACTS_VERSION,
        "diagnosis": {
            "verdict": diagnosis.verdict.value,
            "confidence": diagnosis.confidence,
            "verdicts": [f.verdict.value for f in diagnosis.findings],
            "confidences": {f.verdict.value: f.confidence for f in diagnosis.findings},
            "load_limited": diagnosis.load_limited,
            "window_s": diagnosis.window_s,
            "n_samples": diagnosis.n_samples,
            "findings": [
                {
                    "verdict": f.verdict.value,
                    "confidence": f.confidence,
                    "summary": f.summary,
                    "stage": f.stage,
                    "gpu": f.gpu,
                }
                for f in diagnosis.findings
            ],
        },
        "evidence": _evidence(ev),
        "stages": stages,
        "gpus": [
            {
                "index": g.index,
                "name": g.name or None,
                "power_limit_w": g.power_limit_w,
                "stage": stage_of.get(g.index),
            }
            for g in gpus
        ],
        "engine": engine_facts(engine),
        "training": training_facts(engine, occ),
        "load": {
            "known": running is not None or queued is not None,
            "running": running,
            "queued": queued,
        },
        "hardware": _hardware(gpus, topology, len(stage_of)),
        "topology": {
            "known": topology is not None,
            "source": None if topology is None else topology.source,
            "pp_size": None if topology is None else topology.pp_size,
            "tp_size": None if topology is None else topology.tp_size,
        },
        "held_s": dict(held_s or {}),
        "params": {},
    }
    raw["derived"] = derive(raw)
    return facts_from_mapping(raw, partial=True, argv=() if engine is None else engine.argv)


def _evidence(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence keys, each coerced to its type; a value of the wrong type becomes null."""
    t = SCHEMA.fields["evidence"].type
    assert isinstance(t, Struct)
    out: dict[str, Any] = {}
    for k, f in t.fields.items():
        value = ev.get(k)
        if value is None:
            out[k] = _default(f.type)
            continue
        try:
            out[k] = _coerce(f.type, value, f"evidence.{k}", None)
        except FactsError as e:
            if k not in _warned:
                _warned.add(k)
                log.warning("ignoring evidence the schema cannot hold: %s", e)
            out[k] = _default(f.type)
    return out


def engine_facts(engine: EngineConfig | None) -> dict[str, Any]:
    if engine is None:
        return {"known": False, "argv_known": False, "flags": {}, "env": {}}
    from bubblewatch.topology.endpoint import base_url
    from bubblewatch.topology.flagtable import table_for

    table = table_for(engine.name, engine.version)
    accepted = (
        {} if table is None else {n: s.deprecated for n, s in table.flags.items() if not s.rejected}
    )
    micro: int | None = engine.pp_max_micro_batch_size
    if micro is None and engine.max_running_requests is not None and engine.pp_size > 0:
        micro = max(engine.max_running_requests // engine.pp_size, 1)
    part = engine.layer_partition
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
            and "--pp-max-micro-batch-size" in accepted
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


def _hardware(
    gpus: Sequence[GpuInfo], topology: Topology | None, n_stage_gpus: int
) -> dict[str, Any]:
    names = sorted({g.name for g in gpus if g.name})
    limits = [g.power_limit_w for g in gpus if g.power_limit_w is not None]
    ic = (
        None if topology is None or topology.interconnect is None else topology.interconnect.lower()
    )
    return {
        "gpu_model": " / ".join(names) if names else None,
        "gpu_count": len(gpus) if gpus else n_stage_gpus,
        "power_limit_w": min(limits) if limits else None,
        "interconnect": ic,
    }


def derive(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The `derived` facts: figures computed from the engine, stage, evidence and load facts."""
    engine = raw["engine"]
    stages = raw["stages"]
    pp = engine.get("pp_size") or raw["evidence"].get("pp_size") or len(stages) or None
    conc = _num(raw["evidence"].get("concurrency"))
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
    if running is not None:
        # Measured where the engine's gauge counts one micro-batch (SGLang with PP).
        per_mb = _num(raw["evidence"].get("micro_batch_requests"))
        if per_mb is None and conc is not None:
            per_mb = running / max(conc, 1.0)
        if pp:
            cap = max(math.ceil(running / pp - 1e-9), 1)
    allowed = _num(engine.get("pp_size")) if (engine.get("pp_size") or 0) > 1 else None
    if allowed is None:
        allowed = _num(raw["evidence"].get("micro_batches_allowed"))
    in_flight = _num(raw["evidence"].get("micro_batches_in_flight"))
    return {
        "micro_batches_allowed": allowed,
        "in_flight_ratio": None if allowed is None or in_flight is None else in_flight / allowed,
        "fill_gain_ratio": gain,
        "requests_per_micro_batch": per_mb,
        "micro_batch_cap_suggested": cap,
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


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return None if math.isnan(f) or math.isinf(f) else f


def default_facts_dict() -> dict[str, Any]:
    """Facts where nothing is known: every nullable field null, lists and maps empty."""
    d = _default(SCHEMA)
    assert isinstance(d, dict)
    d["version"] = FACTS_VERSION
    d["diagnosis"].update(
        {"verdict": "insufficient_data", "confidence": 0.0, "window_s": 0.0, "n_samples": 0}
    )
    return d


def _default(t: FieldType) -> Any:
    if isinstance(t, Struct):
        return {k: _default(f.type) for k, f in t.fields.items()}
    if isinstance(t, MapOf):
        return {}
    if isinstance(t, ListOf):
        return None if t.nullable else []
    if not t.nullable:
        return {"bool": False, "int": 0, "double": 0.0, "string": ""}[t.kind]
    return None


def facts_from_mapping(
    given: Mapping[str, Any],
    *,
    where: str = "facts",
    partial: bool = False,
    argv: Sequence[str] = (),
) -> Facts:
    """Validate and coerce a facts mapping; with `partial`, missing fields take defaults.

    Errors name the path of the bad field (`facts.engine.pp_size: expected int, got 'x'`).
    """
    base = default_facts_dict() if partial else None
    return Facts(_coerce(SCHEMA, given, where, base), tuple(argv))


def _coerce(t: FieldType, v: Any, path: str, base: Any) -> Any:
    if isinstance(t, Struct):
        if not isinstance(v, Mapping):
            raise FactsError(f"{path}: expected a mapping, got {_show(v)}")
        unknown = sorted(set(v) - set(t.fields))
        if unknown:
            raise FactsError(f"{path}: unknown field {unknown[0]!r} (known: {', '.join(t.fields)})")
        out = {}
        for k, f in t.fields.items():
            sub_base = None if base is None else base[k]
            if k in v:
                out[k] = _coerce(f.type, v[k], f"{path}.{k}", sub_base)
            elif base is not None:
                out[k] = sub_base
            else:
                raise FactsError(f"{path}: missing field {k!r}")
        return out
    if isinstance(t, ListOf):
        if v is None and t.nullable:
            return None
        if not isinstance(v, (list, tuple)):
            raise FactsError(f"{path}: expected a list, got {_show(v)}")
        elem_base = _default(t.elem) if base is not None and isinstance(t.elem, Struct) else None
        return [_coerce(t.elem, x, f"{path}[{i}]", elem_base) for i, x in enumerate(v)]
    if isinstance(t, MapOf):
        if not isinstance(v, Mapping):
            raise FactsError(f"{path}: expected a mapping, got {_show(v)}")
        return {str(k): _coerce(t.value, x, f"{path}[{k!r}]", None) for k, x in v.items()}
    return _scalar(t, v, path)


def _scalar(t: Scalar, v: Any, path: str) -> Any:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        if t.nullable:
            return None
        raise FactsError(f"{path}: expected {t.kind}, got null")
    if t.kind == "bool" and isinstance(v, bool):
        return v
    if t.kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if t.kind == "int" and isinstance(v, float) and v.is_integer():
        return int(v)
    if t.kind == "double" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if t.kind == "string" and isinstance(v, str):
        return v
    if t.kind == "string" and isinstance(v, (int, float, bool)):
        return str(v).lower() if isinstance(v, bool) else str(v)
    raise FactsError(f"{path}: expected {t.kind}, got {_show(v)}")


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."
