"""Joining the per-host halves of a pipeline into one: pure functions over series labels.

With pipeline parallelism across nodes each host's daemon sees only its own
stages. Every daemon exports `bubblewatch_gpu_info{gpu, pipeline, stage}`
with the pipeline's id and the *global* stage index of each GPU (see
docs/fleet.md); Prometheus adds `instance`. `pipelines_from_info` groups those
label sets into pipelines, `pipeline_topology` orders a pipeline's GPUs into
stages over a Recording's GPU indices, and `join_pipeline` cuts the Recording
down to that pipeline with the topology attached. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bubblewatch.errors import InputError
from bubblewatch.limits import MAX_GPU_INDEX, TOPOLOGY_MAX_GPUS, decimal
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology, TopologyError, index_ranges
from bubblewatch.sources.prometheus_history.fetch import promql_string, re2_escape

__all__ = [
    "FleetError",
    "FleetGpu",
    "FleetPipeline",
    "check_complete",
    "engine_from_info",
    "host_label_of",
    "host_matcher",
    "host_of",
    "join_pipeline",
    "pipeline_topology",
    "pipelines_from_info",
    "recording_index",
]
from bubblewatch.topology.engine_config import EngineConfig

# The labels that name a host, first present wins: as the `bubblewatch` dialect reads them.
HOST_LABELS = ("host", "instance")
SOURCE = "prometheus:fleet"

_MAX_SETTING = (1 << 31) - 1  # an engine setting in a label (sizes, depths)


class FleetError(InputError):
    """The hosts' series do not make one consistent pipeline."""


@dataclass(frozen=True)
class FleetGpu:
    """One GPU of a pipeline: the host that exports it, its index there, its global stage."""

    host: str
    gpu: int
    stage: int
    uuid: str = ""
    name: str = ""
    host_label: str = "instance"  # the label `host` was read from


@dataclass(frozen=True)
class FleetPipeline:
    """A pipeline as the hosts' daemons export it, possibly spread over several hosts."""

    id: str
    gpus: tuple[FleetGpu, ...]
    # The engine's own pp_size (from bubblewatch_engine_info), when a daemon exported it:
    # it tells a missing host's stages from a pipeline that simply ends.
    engine_pp_size: int | None = None

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({g.host for g in self.gpus}))

    @property
    def stages(self) -> tuple[int, ...]:
        return tuple(sorted({g.stage for g in self.gpus}))

    @property
    def missing_stages(self) -> tuple[int, ...]:
        """Stages below the highest seen (or the engine's pp_size) that no host exports."""
        have = set(self.stages)
        top = max(have, default=-1) + 1
        if self.engine_pp_size is not None:
            top = max(top, self.engine_pp_size)
        return tuple(s for s in range(top) if s not in have)

    def stage_hosts(self) -> dict[int, tuple[str, ...]]:
        out: dict[int, set[str]] = {}
        for g in self.gpus:
            out.setdefault(g.stage, set()).add(g.host)
        return {s: tuple(sorted(h)) for s, h in sorted(out.items())}

    def to_dict(self) -> dict[str, object]:
        return {
            "pipeline": self.id,
            "hosts": list(self.hosts),
            "stages": list(self.stages),
            "missing_stages": list(self.missing_stages),
            "engine_pp_size": self.engine_pp_size,
            "gpus": [
                {"host": g.host, "gpu": g.gpu, "stage": g.stage, "uuid": g.uuid} for g in self.gpus
            ],
        }


def host_of(labels: Mapping[str, str]) -> str:
    """The host a series comes from: its `host` label, else Prometheus's `instance`."""
    return host_label_of(labels)[1]


def host_label_of(labels: Mapping[str, str]) -> tuple[str, str]:
    """(label, value) of the first of HOST_LABELS a series carries."""
    return next(((h, labels[h]) for h in HOST_LABELS if labels.get(h)), (HOST_LABELS[-1], ""))


def pipelines_from_info(
    info: Iterable[Mapping[str, str]],
    engine_info: Iterable[Mapping[str, str]] = (),
) -> dict[str, FleetPipeline]:
    """Pipelines by id from `bubblewatch_gpu_info` label sets (oldest first, later ones win).

    GPUs without a pipeline or a stage label are not part of any pipeline and are
    skipped. A GPU whose stage changed within the range keeps its latest stage.
    `engine_info` label sets (`bubblewatch_engine_info`) give the engine's pp_size.
    """
    latest: dict[tuple[str, str, int], FleetGpu] = {}
    for labels in info:
        pid = labels.get("pipeline", "")
        stage = decimal(labels.get("stage", ""), MAX_GPU_INDEX)
        gpu = decimal(labels.get("gpu", ""), MAX_GPU_INDEX)
        if not pid or stage is None or gpu is None:
            continue
        label, host = host_label_of(labels)
        # One GPU belongs to one pipeline at a time: a later label set moves it.
        for key in [k for k in latest if k[0] == host and k[2] == gpu]:
            del latest[key]
        latest[(host, pid, gpu)] = FleetGpu(
            host, gpu, stage, labels.get("uuid", ""), labels.get("name", ""), label
        )
    pp_sizes: dict[str, set[int]] = {}
    for labels in engine_info:
        pp = decimal(labels.get("pp_size", ""), TOPOLOGY_MAX_GPUS)
        if labels.get("pipeline") and pp is not None:
            pp_sizes.setdefault(labels["pipeline"], set()).add(pp)
    by_id: dict[str, list[FleetGpu]] = {}
    for (_, pid, _), g in latest.items():
        by_id.setdefault(pid, []).append(g)
    out: dict[str, FleetPipeline] = {}
    for pid in sorted(by_id):
        sizes = pp_sizes.get(pid, set())
        gpus = tuple(sorted(by_id[pid], key=lambda g: (g.stage, g.host, g.gpu)))
        out[pid] = FleetPipeline(pid, gpus, max(sizes) if sizes else None)
    return out


def host_matcher(p: FleetPipeline) -> str:
    """PromQL label matcher for the pipeline's hosts, e.g. `instance=~"a:9842|b:9842"`.

    Empty when the hosts are named by different labels (then nothing is narrowed:
    more data is read, and the join still keeps only this pipeline's GPUs).
    """
    labels = {g.host_label for g in p.gpus}
    if len(labels) != 1:
        return ""
    alternatives = "|".join(re2_escape(h) for h in p.hosts)
    return f"{labels.pop()}=~{promql_string(alternatives)}"


def check_complete(p: FleetPipeline) -> None:
    """Raises FleetError naming the stages no host exports, and the hosts that were seen."""
    missing = p.missing_stages
    if not missing:
        return
    seen = "; ".join(f"stage {s}: {', '.join(h)}" for s, h in p.stage_hosts().items())
    of = f" of the engine's {p.engine_pp_size}" if p.engine_pp_size is not None else ""
    raise FleetError(
        f"pipeline {p.id!r}: no host exports stage(s) {index_ranges(missing)}{of} "
        f"(seen: {seen}). Is every host's daemon scraped, with the same pipeline id and "
        "its global stage offset (docs/fleet.md)?",
        field="pipeline",
    )


def pipeline_topology(p: FleetPipeline, index: Mapping[tuple[str, int], int]) -> Topology:
    """Stages in global order over Recording GPU indices; `index` maps (host, gpu) to them."""
    check_complete(p)
    absent = [f"{g.host} GPU {g.gpu}" for g in p.gpus if (g.host, g.gpu) not in index]
    if absent:
        raise FleetError(
            f"pipeline {p.id!r}: no telemetry for {', '.join(absent)} in the range "
            "(the GPU info series is there, the GPU's metrics are not)",
            field="pipeline",
        )
    stages: dict[int, list[int]] = {}
    for g in p.gpus:
        stages.setdefault(g.stage, []).append(index[(g.host, g.gpu)])
    try:
        return Topology(
            stages=tuple(tuple(sorted(stages[s])) for s in sorted(stages)),
            source=SOURCE,
            pipeline_id=p.id,
        )
    except TopologyError as e:
        raise FleetError(f"pipeline {p.id!r}: {e}", field="pipeline") from None


def recording_index(recording: Recording) -> dict[tuple[str, int], int]:
    """(host, host-local GPU index) -> GPU index in a Recording from `load_prometheus`."""
    meta = recording.meta.get("prometheus")
    gpus = meta.get("gpus") if isinstance(meta, Mapping) else None
    if not isinstance(gpus, Sequence):
        raise FleetError("the recording does not say which host each GPU came from", field="meta")
    out: dict[tuple[str, int], int] = {}
    for g in gpus:
        local = g.get("local_index")
        if isinstance(local, int):
            out[(str(g.get("host", "")), local)] = int(g["index"])
    return out


def join_pipeline(recording: Recording, p: FleetPipeline) -> Recording:
    """The recording cut to pipeline `p`'s GPUs, with the pipeline's topology attached."""
    topo = pipeline_topology(p, recording_index(recording))
    keep = set(topo.gpus)
    return Recording(
        gpus=tuple(g for g in recording.gpus if g.index in keep),
        series={g: s for g, s in recording.series.items() if g in keep},
        topology=topo,
        load=recording.load,
        events=recording.events,
        meta={**recording.meta, "fleet": p.to_dict()},
    )


def engine_from_info(
    engine_info: Iterable[Mapping[str, str]], pipeline: str
) -> EngineConfig | None:
    """The engine settings a daemon exported for `pipeline` (`bubblewatch_engine_info`).

    Only what the exporter carries (never argv or env); the last label set wins.
    """
    found: Mapping[str, str] | None = None
    for labels in engine_info:
        if labels.get("pipeline") == pipeline and labels.get("engine"):
            found = labels
    if found is None:
        return None

    def num(key: str, default: int | None) -> int | None:
        v = found.get(key, "") if found else ""
        n = decimal(v, _MAX_SETTING)
        return default if n is None else n

    return EngineConfig(
        name=found["engine"],
        version=found.get("version") or None,
        pp_size=num("pp_size", 1) or 1,
        tp_size=num("tp_size", 1) or 1,
        ep_size=num("ep_size", 1) or 1,
        cuda_graph=found.get("cuda_graph", "true") != "false",
        pp_async_batch_depth=num("pp_async_batch_depth", None),
        pp_max_micro_batch_size=num("pp_max_micro_batch_size", None),
    )
