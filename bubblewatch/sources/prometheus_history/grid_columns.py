"""Answers of many range queries gathered into per-GPU columns on one grid, then a Recording.

`GridColumns.add` writes one answer's series into a float64 array per (GPU,
exporter series), allocated on first use: nothing per point survives the
answer. `build` numbers the GPUs (NVML indices on one host; host by host
otherwise, with `GpuInfo.host` set), merges two series of one metric (first
in the dialect's order wins), and keeps each GPU's grid points where it has
any value. `topology_from_info` reads the topology bubblewatch's own
`bubblewatch_gpu_info` carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from bubblewatch.limits import MAX_GPU_INDEX, decimal
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import FloatArray, GpuSeries, Recording
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.prometheus_history.dialects import Dialect
from bubblewatch.sources.prometheus_history.fetch import Grid
from bubblewatch.sources.prometheus_history.matrix import RangeSeries

Ident = tuple[str, Any]


@dataclass(frozen=True)
class GpuKey:
    host: str
    local: int | None
    uuid: str


def gpu_key(d: Dialect, labels: Mapping[str, str]) -> GpuKey:
    host = next((labels[h] for h in d.host_labels if labels.get(h)), "")
    raw = labels.get(d.gpu_label) if d.gpu_label else None
    local = decimal(raw, MAX_GPU_INDEX) if raw is not None else None
    uuid = labels.get(d.uuid_label, "") if d.uuid_label else ""
    return GpuKey(host, local, uuid)


def identity(key: GpuKey) -> Ident:
    return (key.host, key.local if key.local is not None else key.uuid)


class GridColumns:
    """Per-GPU, per-series value arrays on one grid, filled answer by answer."""

    def __init__(self, dialect: Dialect, grid: Grid) -> None:
        self.dialect = dialect
        self.grid = grid
        self.keys: dict[Ident, GpuKey] = {}
        self.names: dict[Ident, str] = {}
        self.cols: dict[Ident, dict[int, FloatArray]] = {}
        self.seen: set[int] = set()  # the dialect's series that answered

    def add(self, spec_index: int, answer: list[RangeSeries]) -> None:
        d = self.dialect
        spec = d.series[spec_index]
        for s in answer:
            key = gpu_key(d, s.labels)
            ident = identity(key)
            if ident not in self.keys or (not self.keys[ident].uuid and key.uuid):
                self.keys[ident] = key
            if d.name_label and s.labels.get(d.name_label):
                self.names[ident] = s.labels[d.name_label]
            per_gpu = self.cols.setdefault(ident, {})
            col = per_gpu.get(spec_index)
            if col is None:
                col = per_gpu[spec_index] = np.full(self.grid.n, np.nan)
            k, ok = self.grid.index(s.t_s)
            col[k[ok]] = s.values[ok] * spec.scale
            self.seen.add(spec_index)

    def used(self) -> dict[str, str]:
        """metric -> the exporter series it was read from (the first in the dialect's order)."""
        out: dict[str, str] = {}
        for i in sorted(self.seen):
            spec = self.dialect.series[i]
            out.setdefault(spec.metric.value, spec.name)
        return out

    def nbytes(self) -> int:
        return sum(a.nbytes for per in self.cols.values() for a in per.values())

    def index(self) -> dict[Ident, int]:
        """Recording GPU index of each GPU: NVML's on one host, else numbered host by host."""
        keys = self.keys
        hosts = sorted({k.host for k in keys.values()})
        index: dict[Ident, int] = {}
        offset = 0
        for host in hosts:
            mine = sorted(
                (i for i in keys if i[0] == host),
                key=lambda i: (keys[i].local is None, keys[i].local or 0, keys[i].uuid),
            )
            if len(hosts) == 1 and all(keys[i].local is not None for i in mine):
                index.update({i: keys[i].local or 0 for i in mine})  # keep NVML indices
                continue
            for n, i in enumerate(mine):
                index[i] = offset + n
            offset += len(mine)
        return index

    def build(self, info: list[RangeSeries], meta: Mapping[str, Any]) -> Recording:
        """The Recording; `info` are bubblewatch_gpu_info series (identity and topology)."""
        d = self.dialect
        index = self.index()
        info_by_ident = {identity(gpu_key(d, s.labels)): s.labels for s in info}
        t_grid = self.grid.t_s()
        gpus: list[GpuInfo] = []
        series: dict[int, GpuSeries] = {}
        for ident in list(self.cols):
            g = index[ident]
            lab = info_by_ident.get(ident, {})
            key = self.keys[ident]
            gpus.append(
                GpuInfo(
                    index=g,
                    uuid=key.uuid or lab.get("uuid", ""),
                    name=self.names.get(ident) or lab.get("name", ""),
                    host=key.host,
                    pci_bus_id=lab.get("pci_bus_id", ""),
                )
            )
            series[g] = self._series(g, self.cols.pop(ident), t_grid)
        gpu_meta = [
            {
                "index": index[i],
                "host": self.keys[i].host,
                "local_index": self.keys[i].local,
                "uuid": self.keys[i].uuid,
            }
            for i in sorted(index, key=index.__getitem__)
        ]
        return Recording(
            gpus=tuple(sorted(gpus, key=lambda x: x.index)),
            series=dict(sorted(series.items())),
            topology=topology_from_info(d, info, index),
            meta={**meta, "series": self.used(), "gpus": gpu_meta},
        )

    def _series(self, g: int, per_spec: dict[int, FloatArray], t_grid: FloatArray) -> GpuSeries:
        by_metric: dict[Metric, FloatArray] = {}
        for spec_index in sorted(per_spec):  # the dialect's order: the first series wins
            metric = self.dialect.series[spec_index].metric
            values = per_spec[spec_index]
            prev = by_metric.get(metric)
            by_metric[metric] = values if prev is None else np.where(np.isnan(prev), values, prev)
        rows = np.zeros(self.grid.n, dtype=bool)
        for v in by_metric.values():
            rows |= np.isfinite(v)
        ordered = sorted(by_metric.items(), key=lambda x: x[0].value)
        if rows.all():  # every grid point has a value: share the grid, copy nothing
            return GpuSeries(g, t_grid, dict(ordered))
        return GpuSeries(g, t_grid[rows], {m: v[rows] for m, v in ordered})


def topology_from_info(
    d: Dialect, info: list[RangeSeries], index: Mapping[Ident, int]
) -> Topology | None:
    """bubblewatch_gpu_info carries each GPU's pipeline and stage: the topology, when unique."""
    stages: dict[int, list[int]] = {}
    pipelines = set()
    for s in info:
        ident = identity(gpu_key(d, s.labels))
        stage = decimal(s.labels.get("stage", ""), MAX_GPU_INDEX)
        if ident not in index or stage is None:
            continue
        pipelines.add(s.labels.get("pipeline", ""))
        stages.setdefault(stage, []).append(index[ident])
    # One host of a pipeline that spans hosts holds a run of its stages (4-7 of 8, say):
    # still that host's part of the pipeline, in order.
    first = min(stages, default=0)
    if (
        not stages
        or len(pipelines) != 1
        or sorted(stages) != list(range(first, first + len(stages)))
    ):
        return None
    try:
        return Topology(
            stages=tuple(tuple(sorted(set(stages[s]))) for s in sorted(stages)),
            source="prometheus:bubblewatch_gpu_info"
            + (f" (stages {first}-{first + len(stages) - 1})" if first else ""),
            pipeline_id=pipelines.pop(),
        )
    except TopologyError:
        return None
