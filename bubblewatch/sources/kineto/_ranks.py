"""Which rank each profiler trace is, and which pipeline stage each rank belongs to.

The rank comes from the trace (`distributedInfo`), else from its file name
(SGLang's `-TP-{tp}-PP-{pp}`, or a plain rank number), else from file order.
The stages come from the options, the file names, the process groups in the
trace, or are assumed one rank per stage; the second value says which.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bubblewatch.errors import InputError
from bubblewatch.limits import KINETO_MAX_RANK, LimitError
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.kineto.options import KinetoOptions
from bubblewatch.sources.kineto.reader import DeviceTimeline, RankTrace

# The logger of the module these warnings were first written in, which users may filter on.
log = logging.getLogger("bubblewatch.sources.kineto.build")


@dataclass(frozen=True)
class Unit:
    """One GPU's timeline with its rank and where it came from."""

    rank: int
    trace: RankTrace
    timeline: DeviceTimeline | None


def rank_units(traces: Sequence[RankTrace], options: KinetoOptions) -> list[Unit]:
    multi = [t for t in traces if len(t.devices) > 1]
    if multi:
        if len(traces) > 1:
            raise InputError(
                f"kernels on {len(multi[0].devices)} devices in one file among several files: "
                "give one file per rank, or a single file of a single-process run",
                path=multi[0].path,
            )
        t = multi[0]
        for d in t.devices:
            _check_rank(d, t.path, "device index")
        return [Unit(d, t, tl) for d, tl in t.devices.items()]
    ranks = _ranks(traces, options)
    units: list[Unit] = []
    seen: dict[int, str] = {}
    for t, r in zip(traces, ranks, strict=True):
        _check_rank(r, t.path, "rank")
        if r in seen:
            raise InputError(
                f"rank {r} appears twice: in {seen[r]} and in this file (one file per rank)",
                path=t.path,
            )
        seen[r] = t.path
        tl = next(iter(t.devices.values()), None)
        if tl is None:
            log.warning("%s: no GPU kernels in this trace (rank %d); counted as idle", t.path, r)
        units.append(Unit(r, t, tl))
    return sorted(units, key=lambda u: u.rank)


def _check_rank(rank: int, path: str, what: str) -> None:
    """A pipeline is laid out up to its highest rank: a huge one would take all the memory."""
    if rank > KINETO_MAX_RANK:
        raise LimitError(f"{what} {rank} is above {KINETO_MAX_RANK}", path=path)


def _ranks(traces: Sequence[RankTrace], options: KinetoOptions) -> list[int]:
    if all(t.rank is not None for t in traces):
        return [t.rank for t in traces if t.rank is not None]
    if all(t.filename_tp_rank is not None for t in traces):
        # SGLang names files ...-TP-{tp}[-PP-{pp}]...: global rank = pp * tp_size + tp.
        tp = options.tp_size or max(t.filename_tp_rank or 0 for t in traces) + 1
        return [(t.filename_pp_rank or 0) * tp + (t.filename_tp_rank or 0) for t in traces]
    if all(t.filename_rank is not None for t in traces):
        return [t.filename_rank for t in traces if t.filename_rank is not None]
    if len(traces) > 1:
        log.warning(
            "no rank in the traces (distributedInfo) or their names; ranks follow file order: %s",
            ", ".join(Path(t.path).name for t in traces),
        )
    return list(range(len(traces)))


def stage_topology(units: Sequence[Unit], options: KinetoOptions) -> tuple[Topology, str]:
    ranks = [u.rank for u in units]
    n = max(ranks) + 1
    try:
        if options.pp_size is not None or options.tp_size is not None:
            tp = options.tp_size or 1
            pp = options.pp_size or math.ceil(n / tp)
            if n > pp * tp:
                raise InputError(
                    f"rank {n - 1} does not fit pp_size {pp} x tp_size {tp}",
                    path=units[-1].trace.path,
                )
            return Topology.from_sizes(pp, tp, source="kineto:options"), "options"
        from_names = _topology_from_filenames(units)
        if from_names is not None:
            return from_names, "filenames"
        from bubblewatch.sources.kineto.pipeline_steps import topology_from_pipeline_groups

        named = topology_from_pipeline_groups([(u.rank, u.trace) for u in units])
        if named is not None:
            return named, "pipeline_groups"
        from_groups = _topology_from_process_groups(units)
        if from_groups is not None:
            return from_groups, "process_groups"
    except TopologyError as e:
        raise InputError(f"inconsistent topology: {e}", path=units[0].trace.path) from e
    world = units[0].trace.world_size
    if world is not None and world > 1 and len(units) > 1:
        log.warning(
            "pipeline/tensor parallel sizes unknown: assuming one rank per stage (tp_size 1); "
            "pass pp_size/tp_size if that is wrong"
        )
    return Topology(stages=tuple((r,) for r in sorted(ranks)), source="kineto:assumed"), "assumed"


def _topology_from_filenames(units: Sequence[Unit]) -> Topology | None:
    if not all(u.trace.filename_pp_rank is not None for u in units):
        return None
    stages: dict[int, list[int]] = {}
    for u in units:
        stages.setdefault(u.trace.filename_pp_rank or 0, []).append(u.rank)
    order = sorted(stages)
    if order != list(range(len(order))):
        return None
    return Topology(
        stages=tuple(tuple(sorted(stages[s])) for s in order), source="kineto:filenames"
    )


def _topology_from_process_groups(units: Sequence[Unit]) -> Topology | None:
    """A process group whose ranks step by tp (0, tp, 2tp, ...) is a pipeline group."""
    world = units[0].trace.world_size
    pgs = units[0].trace.distributed.get("pg_config")
    if world is None or not isinstance(pgs, list):
        return None
    for pg in pgs:
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if not isinstance(ranks, list) or len(ranks) < 2 or len(ranks) >= world:
            continue
        if not all(isinstance(r, int) for r in ranks):
            continue
        steps = {b - a for a, b in itertools.pairwise(ranks)}
        if len(steps) != 1:
            continue
        tp = steps.pop()
        pp = len(ranks)
        if tp > 1 and pp * tp == world:
            return Topology.from_sizes(pp, tp, source="kineto:process_groups")
    return None
