"""Facts: the one namespace rules see, built from a diagnosis and engine configuration.

Pure: a function of its arguments. Every value is coerced to the type the
schema gives it (ints stay ints, measured figures are doubles, NaN is null),
so expressions behave the same whatever produced the facts. The parts: the
engine's facts (engine_facts), the derived figures (derived_facts), the
coercion to the schema (_facts_coerce).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.rules._facts_coerce import coerce, default_facts_dict, default_value
from bubblewatch.rules._schema_types import Struct
from bubblewatch.rules.derived_facts import derive, num
from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.rules.errors import FactsError
from bubblewatch.rules.load_peak import LoadPeak
from bubblewatch.rules.schema import FACTS_VERSION, SCHEMA
from bubblewatch.rules.training_facts import training_facts
from bubblewatch.topology.engine_config import EngineConfig

if TYPE_CHECKING:  # the live-state reader and process discovery are not needed here
    from bubblewatch.sources.engine_state import LiveState
    from bubblewatch.topology.single_process import SingleProcessJob

__all__ = ["Facts", "build_facts", "facts_from_mapping"]

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
    live: LiveState | None = None,
    peak: LoadPeak | None = None,
    process: SingleProcessJob | None = None,
) -> Facts:
    """Facts from the detector's answer, the engine configuration, topology and GPU identity.

    `live`: the engine's settings read back from it, joined over its command line's.
    `peak` is the load history's peak (rules.load_peak): limits are sized for it.
    `process`: the one process that holds several GPUs, where no engine is known.
    """
    ev = diagnosis.evidence
    stage_of = {g: st.stage for st in diagnosis.stages for g in st.gpus}
    occ = [num(st.occupancy_ratio) for st in diagnosis.stages]
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
    running = num(ev.get("running_requests"))
    queued = num(ev.get("queued_requests"))
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
        "engine": engine_facts(engine, live),
        "training": training_facts(engine, occ),
        "process": _process(process),
        "load": {
            "known": running is not None or queued is not None,
            "running": running,
            "queued": queued,
            "peak": None if peak is None else peak.requests,
            "peak_span_s": None if peak is None else peak.span_s,
            "peak_source": None if peak is None else peak.source,
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


def _process(job: SingleProcessJob | None) -> dict[str, Any]:
    if job is None:
        return {"known": False}
    from bubblewatch.topology.single_process import layer_placement

    placed = layer_placement(job)
    return {
        "known": True,
        "runtime": job.runtime,
        "split": job.split,
        "tensor_split": list(job.tensor_split),
        "gpus": list(job.gpus),
        "layer_order": list(placed.order),
        "layer_order_source": placed.source,
    }


def _evidence(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence keys, each coerced to its type; a value of the wrong type becomes null."""
    t = SCHEMA.fields["evidence"].type
    assert isinstance(t, Struct)
    out: dict[str, Any] = {}
    for k, f in t.fields.items():
        value = ev.get(k)
        if value is None:
            out[k] = default_value(f.type)
            continue
        try:
            out[k] = coerce(f.type, value, f"evidence.{k}", None)
        except FactsError as e:
            if k not in _warned:
                _warned.add(k)
                log.warning("ignoring evidence the schema cannot hold: %s", e)
            out[k] = default_value(f.type)
    return out


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
    return Facts(coerce(SCHEMA, given, where, base), tuple(argv))
