"""A serving simulation written to a trace a part at a time: memory for a part, not the run.

`simulate_to_trace` runs each replica's event loop (its micro-batches, a few
numbers each), decides every poll and its noise up front (observe.plan_polls,
the draws `observe` makes), then goes through the run in parts of `part_s`
seconds: the part's activity (the intervals that reach into it), its physics
(the temperature filter and the trailing idle window carried from the part
before, power.PhysicsCarry), the polls that fall in it (read from the part and
the end of the one before, as far back as a poll's windows reach), written as
they come. The truth (each stage's busy, spin, utilisation, SM activity and
power) is summed part by part. What it writes is what `simulate` then
`observe` and `write_trace` write, but for the last digits of sums taken in
parts; the header's meta leaves the run's outcome (throughput, truth) to the
summary record at the end, which readers merge into the meta.
Training scenarios are not simulated this way (see training.py): the CLI
runs them whole.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.sim.activity import empty_activity, replica_activity
from bubblewatch.sim.observe import (
    DEFAULT_EPOCH_S,
    Polls,
    load_series,
    measure,
    plan_polls,
    run_meta,
)
from bubblewatch.sim.power import PhysicsCarry, wait_power_above_idle_w
from bubblewatch.sim.replica import run_replica
from bubblewatch.sim.result import Truth
from bubblewatch.sim.runs import DEFAULT_DT_S, build_timeline, check_run, gpu_uuid
from bubblewatch.sim.serving import ReplicaTrace
from bubblewatch.sim.simulate import (
    replica_load,
    replica_phases,
    replica_stages,
    replica_topology,
    stage_truth,
)
from bubblewatch.sim.spec import Scenario
from bubblewatch.sim.timeline import Timeline
from bubblewatch.sim.truth_series import TruthAccumulator
from bubblewatch.sources.trace import TraceWriter
from bubblewatch.sources.trace.column_lines import sample_and_load_lines

FloatArray = npt.NDArray[np.float64]
PART_S = 30.0
_SUMMED = ("busy", "spin", "kernel_busy", "sm_active", "power_w")


@dataclass(frozen=True)
class StreamedRun:
    """What `simulate_to_trace` wrote: samples, GPUs, throughput and the truth."""

    n_samples: int
    n_gpus: int
    tokens_per_s: float
    truth: Truth


def simulate_to_trace(
    sc: Scenario,
    path: str | os.PathLike[str],
    *,
    duration_s: float,
    seed: int,
    interval_s: float,
    summary: Callable[[float, Truth], Mapping[str, Any]],
    dt_s: float = DEFAULT_DT_S,
    part_s: float = PART_S,
    epoch_s: float = DEFAULT_EPOCH_S,
) -> StreamedRun:
    """Simulate `sc` and write its trace to `path`; `summary(tokens_per_s, truth)` ends it."""
    par = sc.parallel
    check_run(duration_s, dt_s, par.n_gpus)
    n_cells = max(1, math.ceil(duration_s / dt_s - 1e-9))
    n_gpus = par.n_gpus
    reps: list[ReplicaTrace] = []
    layouts = []
    for r in range(par.dp_size):
        stages = replica_stages(sc, r)
        rng = np.random.default_rng([seed, r])
        reps.append(run_replica(sc, stages, replica_phases(sc, r), duration_s, rng))
        layouts.append(stages)
    span = min(duration_s, n_cells * dt_s)
    polls = plan_polls(sc, n_gpus, span, interval_s, seed)
    gpu = sc.hardware.gpu
    gpus = tuple(
        GpuInfo(index=i, uuid=gpu_uuid(i), name=gpu.name, power_limit_w=gpu.power_limit_w)
        for i in range(n_gpus)
    )
    topologies = tuple(replica_topology(sc, r, st) for r, st in enumerate(layouts))
    meta = {
        **run_meta(
            sc,
            sim_seed=seed,
            duration_s=duration_s,
            interval_s=interval_s,
            seed=seed,
            epoch=epoch_s,
        ),
        "pipelines": [t.to_dict() for t in topologies],
    }
    load = load_series(replica_load(reps), 1.0, span, epoch_s)
    sums = {name: np.zeros(n_gpus) for name in _SUMMED}
    topology = topologies[0] if len(topologies) == 1 else None
    written = 0
    with TraceWriter(path, gpus=gpus, topology=topology, meta=meta, flush_every=1000) as w:
        parts = _Parts(
            sc,
            reps=reps,
            layouts=layouts,
            polls=polls,
            n_cells=n_cells,
            dt_s=dt_s,
            duration_s=duration_s,
            part_s=part_s,
        )
        for part in parts:
            for name, v in part.sums.items():
                sums[name] += v
            ticks = part.ticks
            if ticks.stop <= ticks.start:
                continue
            values = measure(part.timeline, polls, ticks, part.power_prefix)
            # The load rows between this part's first poll and the next part's.
            lo = -math.inf if ticks.start == 0 else float(polls.t[:, ticks.start].min())
            hi = math.inf if ticks.stop >= polls.n_ticks else float(polls.t[:, ticks.stop].min())
            rec = Recording(
                gpus=gpus,
                series=_series(polls, values, ticks, epoch_s),
                load=load.window(epoch_s + lo, epoch_s + hi),
            )
            for text, n in sample_and_load_lines(rec):
                w.lines(text, n)
            written += rec.n_samples
        tokens = sum(r.tokens for r in reps)
        tokens_per_s = tokens / min(duration_s, n_cells * dt_s)
        series = parts.truth.result([(r.in_flight_t_s, r.in_flight) for r in reps])
        for x in series.records(epoch_s):
            w.extension(x)

        def mean(name: str, g: list[int]) -> float:
            return float(sums[name][g].sum() / (len(g) * n_cells))

        truth = stage_truth(sc, reps=reps, layouts=layouts, mean=mean, duration_s=duration_s)
        w.summary(summary(tokens_per_s, truth))
    return StreamedRun(written, n_gpus, tokens_per_s, truth)


def _series(
    polls: Polls, values: Mapping[Metric, FloatArray], ticks: slice, epoch: float
) -> dict[int, GpuSeries]:
    t, keep = polls.t[:, ticks], polls.keep[:, ticks]
    return {
        g: GpuSeries(g, t[g, keep[g]] + epoch, {m: v[g, keep[g]] for m, v in values.items()})
        for g in range(t.shape[0])
    }


@dataclass(frozen=True)
class _Part:
    """One part of the run: the polls it completes and the timeline they read."""

    ticks: slice
    timeline: Timeline  # this part and the end of the one before
    power_prefix: FloatArray  # the timeline's power integral from the run's start
    sums: dict[str, FloatArray]  # per GPU, over this part's cells (for the truth)


class _Parts:
    """The run in parts of PART_S seconds, with what carries from one to the next."""

    def __init__(
        self,
        sc: Scenario,
        *,
        reps: list[ReplicaTrace],
        layouts: list[tuple[tuple[int, ...], ...]],
        polls: Polls,
        n_cells: int,
        dt_s: float,
        duration_s: float,
        part_s: float,
    ) -> None:
        self.sc, self.reps, self.layouts, self.polls = sc, reps, layouts, polls
        self.part_s = part_s
        self.n_cells, self.dt_s, self.duration_s = n_cells, dt_s, duration_s
        reach = polls.lookback_s(slice(None))
        self.keep_cells = math.ceil(float(np.nanmax(reach, initial=1.0)) / dt_s) + 2
        # When every GPU's poll of a tick (and of all ticks before it) is done.
        self.tick_end = np.maximum.accumulate(np.nanmax(polls.t, axis=0))
        self.truth = TruthAccumulator(polls.t.shape[0], n_cells, dt_s)

    def __iter__(self) -> Iterator[_Part]:
        sc, dt = self.sc, self.dt_s
        n_gpus = self.polls.t.shape[0]
        per = max(1, round(self.part_s / dt))
        carry = PhysicsCarry(total_cells=self.n_cells)
        tail: Timeline | None = None
        tail_prefix = np.zeros((n_gpus, 1))
        done = 0
        for first in range(0, self.n_cells, per):
            k = min(per, self.n_cells - first)
            act = empty_activity(n_gpus, k)
            for rep, stages in zip(self.reps, self.layouts, strict=True):
                replica_activity(
                    sc, rep, stage_gpus=stages, out=act, n_cells=k, dt_s=dt,
                    duration_s=self.duration_s, first_cell=first,
                )  # fmt: skip
            part = build_timeline(sc, act, dt, carry)
            self.truth.add(
                first,
                busy=act.busy,
                spin=act.spin,
                power_w=part.field("power_w"),
                wait_w=wait_power_above_idle_w(sc, act.spin, sc.spin.sm_active_ratio),
            )
            sums = {
                "busy": act.busy.sum(axis=1),
                "spin": act.spin.sum(axis=1),
                **{n: part.field(n).astype(np.float64).sum(axis=1) for n in _SUMMED[2:]},
            }
            tl, prefix = _joined(tail, tail_prefix, part)
            last = first + k >= self.n_cells
            end_s = (first + k) * dt
            upto = self.polls.n_ticks if last else int(np.searchsorted(self.tick_end, end_s))
            yield _Part(slice(done, upto), tl, prefix, sums)
            done = max(done, upto)
            tail, tail_prefix = _tail(tl, prefix, self.keep_cells)


def _joined(
    tail: Timeline | None, tail_prefix: FloatArray, part: Timeline
) -> tuple[Timeline, FloatArray]:
    """The tail of the parts before and this one, with the power integral from the start."""
    power = part.field("power_w").astype(np.float64) * part.dt_s
    start = tail_prefix[:, -1:]
    prefix = np.cumsum(np.concatenate([start, power], axis=1), axis=1)
    if tail is None:
        return part, prefix
    data = np.concatenate([tail.data, part.data], axis=2)
    joined = Timeline(data, part.dt_s, part.gpus, tail.t0_s)
    return joined, np.concatenate([tail_prefix[:, :-1], prefix], axis=1)


def _tail(tl: Timeline, prefix: FloatArray, cells: int) -> tuple[Timeline, FloatArray]:
    """The last `cells` cells of `tl` (what the next part's polls may reach back to)."""
    n = min(cells, tl.n_cells)
    cut = tl.n_cells - n
    data = np.ascontiguousarray(tl.data[:, :, cut:])
    return Timeline(data, tl.dt_s, tl.gpus, tl.t0_s + cut * tl.dt_s), prefix[:, cut:].copy()
