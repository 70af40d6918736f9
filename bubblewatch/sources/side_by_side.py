"""Several recordings as one: the nodes of a multi-node job, each captured in its own file.

GPUs are renumbered in file order: file k's GPU g becomes g + (the GPU count
of the files before it), so with one file per node and `--pp-size/--tp-size`
laid out node-major, a stage can be a node. Each GPU keeps where it came from
in `GpuInfo.host` (the file's host, else the file name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import GpuSeries, LoadSeries, Recording
from bubblewatch.model.samples import Event


def join_side_by_side(recordings: Sequence[Recording], names: Sequence[str] = ()) -> Recording:
    """One recording from several, GPUs renumbered file after file (see the module docstring)."""
    if not recordings:
        raise ValueError("join_side_by_side needs at least one recording")
    if len(recordings) == 1:
        return recordings[0]
    gpus = []
    series: dict[int, GpuSeries] = {}
    events: list[Event] = []
    offset = 0
    for k, rec in enumerate(recordings):
        label = names[k] if k < len(names) else f"file {k}"
        host = str(rec.meta.get("host") or label)
        order = sorted(rec.series)
        index = {g: offset + i for i, g in enumerate(order)}
        by_index = {g.index: g for g in rec.gpus}
        for g in order:
            info = by_index.get(g)
            new = index[g]
            gpus.append(
                replace(info, index=new, host=info.host or host)
                if info is not None
                else GpuInfo(index=new, host=host)
            )
            s = rec.series[g]
            series[new] = GpuSeries(new, s.t_s, s.values)
        events.extend(
            replace(e, gpu=None if e.gpu is None else index.get(e.gpu, e.gpu)) for e in rec.events
        )
        offset += len(order)
    meta: dict[str, Any] = {
        "source": "joined",
        "sources": [
            {"file": names[k] if k < len(names) else f"file {k}", "gpus": len(r.series)}
            for k, r in enumerate(recordings)
        ],
    }
    return Recording(
        gpus=tuple(gpus),
        series=series,
        topology=None,
        load=LoadSeries.concat(r.load for r in recordings),
        events=tuple(sorted(events, key=lambda e: e.t_s)),
        meta=meta,
    )
