"""`simulate`: run every replica's event loop, bin onto the grid, apply the physics."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch import engines
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.sim.activity import empty_activity, replica_activity
from bubblewatch.sim.replica import run_replica
from bubblewatch.sim.result import (
    LoadHistory,
    ReplicaTruth,
    SimResult,
    StageTruth,
    Truth,
)
from bubblewatch.sim.runs import DEFAULT_DT_S, build_timeline, check_run, gpu_uuid, truth_series
from bubblewatch.sim.serving import ReplicaTrace
from bubblewatch.sim.spec import Scenario
from bubblewatch.sim.training import simulate_training
from bubblewatch.sim.training_spec import TrainingScenario


def replica_stages(sc: Scenario, replica: int) -> tuple[tuple[int, ...], ...]:
    """GPU indices per stage: rank r = pp_rank * tp + tp_rank after the earlier replicas."""
    par = sc.parallel
    base = replica * par.pp_size * par.tp_size
    return tuple(
        tuple(base + s * par.tp_size + t for t in range(par.tp_size)) for s in range(par.pp_size)
    )


def replica_phases(sc: Scenario, replica: int) -> list[tuple[float, int]]:
    dp = sc.parallel.dp_size
    out = []
    for p in sc.workload.phases():
        share = p.concurrency // dp + (1 if replica < p.concurrency % dp else 0)
        out.append((p.start_s, share))
    return out


def simulate(
    sc: Scenario | TrainingScenario,
    duration_s: float = 60.0,
    seed: int = 0,
    *,
    dt_s: float = DEFAULT_DT_S,
) -> SimResult:
    """Simulate `sc` for `duration_s` seconds; the same seed gives the same result.

    A training scenario (a `job` section) runs the training-job model
    (training.py); a serving scenario runs the engine's event loop.
    """
    if isinstance(sc, TrainingScenario):
        return simulate_training(sc, duration_s, seed, dt_s=dt_s)
    par = sc.parallel
    check_run(duration_s, dt_s, par.n_gpus)
    n_cells = max(1, math.ceil(duration_s / dt_s - 1e-9))
    n_gpus = par.n_gpus
    act = empty_activity(n_gpus, n_cells)
    reps: list[ReplicaTrace] = []
    layouts = []
    for r in range(par.dp_size):
        stages = replica_stages(sc, r)
        rng = np.random.default_rng([seed, r])
        rep = run_replica(sc, stages, replica_phases(sc, r), duration_s, rng)
        replica_activity(
            sc, rep, stage_gpus=stages, out=act, n_cells=n_cells, dt_s=dt_s, duration_s=duration_s
        )
        reps.append(rep)
        layouts.append(stages)
    timeline = build_timeline(sc, act, dt_s)
    gpu = sc.hardware.gpu
    span = n_cells * dt_s
    fields: dict[str, npt.NDArray[Any]] = {
        "busy": act.busy,
        "spin": act.spin,
        "kernel_busy": timeline.field("kernel_busy"),
        "sm_active": timeline.field("sm_active"),
        "power_w": timeline.field("power_w"),
    }
    truth = stage_truth(
        sc,
        reps=reps,
        layouts=layouts,
        mean=lambda name, g: float(fields[name][g].mean()),
        duration_s=duration_s,
    )
    tokens = sum(r.tokens for r in reps)
    series = truth_series(
        sc,
        act,
        timeline,
        in_flight=[(r.in_flight_t_s, r.in_flight) for r in reps],
        spin_sm_active_ratio=sc.spin.sm_active_ratio,
    )
    return SimResult(
        scenario=sc,
        duration_s=duration_s,
        seed=seed,
        timeline=timeline,
        tokens_per_s=tokens / min(duration_s, span),
        truth=truth,
        gpus=tuple(
            GpuInfo(index=i, uuid=gpu_uuid(i), name=gpu.name, power_limit_w=gpu.power_limit_w)
            for i in range(n_gpus)
        ),
        topologies=tuple(replica_topology(sc, r, st) for r, st in enumerate(layouts)),
        load=replica_load(reps),
        truth_series=series,
    )


def replica_topology(sc: Scenario, replica: int, stages: tuple[tuple[int, ...], ...]) -> Topology:
    env = {}
    if sc.parallel.layer_partition is not None:
        var = engines.require(sc.engine).command.layer_partition_env
        if var is not None:
            env[var] = ",".join(str(n) for n in sc.parallel.layer_partition)
    return Topology(
        stages=stages,
        engine=sc.engine,
        source="sim",
        pipeline_id=f"replica-{replica}" if sc.parallel.dp_size > 1 else "",
        interconnect=sc.hardware.interconnect.kind,
        argv=sc.engine_argv,
        env=env,
    )


def _step_mean(t: np.ndarray, v: np.ndarray, end_s: float) -> float:
    """Time-weighted mean over [0, end_s] of a step function starting at t[0] = 0."""
    edges = np.append(np.minimum(t, end_s), end_s)
    return float(np.sum(v * np.diff(edges)) / end_s) if end_s > 0 else 0.0


def stage_truth(
    sc: Scenario,
    *,
    reps: list[ReplicaTrace],
    layouts: list[tuple[tuple[int, ...], ...]],
    mean: Callable[[str, list[int]], float],
    duration_s: float,
) -> Truth:
    """What each stage and replica really did; `mean(field, gpus)` over the run's cells.

    Fields: busy and spin (activity), kernel_busy, sm_active and power_w (timeline).
    """
    stages: list[StageTruth] = []
    replicas: list[ReplicaTruth] = []
    layers = sc.stage_layers
    for r, (rep, layout) in enumerate(zip(reps, layouts, strict=True)):
        busy_sum = 0.0
        for s, gpus in enumerate(layout):
            g = list(gpus)
            st = rep.stages[s]
            b = mean("busy", g)
            busy_sum += b
            stages.append(
                StageTruth(
                    replica=r,
                    stage=s,
                    gpus=gpus,
                    layers=layers[s],
                    busy_ratio=b,
                    spin_ratio=mean("spin", g),
                    kernel_busy_ratio=mean("kernel_busy", g),
                    sm_active_ratio=mean("sm_active", g),
                    power_w=mean("power_w", g),
                    micro_batches=int(st.start_s.size),
                    mean_stage_time_s=float(np.mean(st.end_s - st.start_s))
                    if st.start_s.size
                    else 0.0,
                )
            )
        replicas.append(
            ReplicaTruth(
                replica=r,
                tokens=rep.tokens,
                tokens_per_s=rep.tokens / duration_s,
                mean_in_flight=_step_mean(rep.in_flight_t_s, rep.in_flight, duration_s),
                max_in_flight=rep.max_in_flight,
                micro_batch_cap=rep.micro_batch_cap,
                decode_tokens_per_micro_batch=rep.decode_tokens_per_micro_batch,
                mean_running=_step_mean(rep.load_t_s, rep.running, duration_s),
                mean_queued=_step_mean(rep.load_t_s, rep.queued, duration_s),
                busy_sum=busy_sum,
            )
        )
    return Truth(tuple(stages), tuple(replicas))


def replica_load(reps: list[ReplicaTrace]) -> LoadHistory:
    t = np.unique(np.concatenate([r.load_t_s for r in reps]))
    running = np.zeros_like(t)
    queued = np.zeros_like(t)
    micro = np.zeros_like(t)
    for r in reps:
        k = np.searchsorted(r.load_t_s, t, side="right") - 1
        running += r.running[k]
        queued += r.queued[k]
        micro += r.micro_batch[k]  # the engine sums its replicas' gauges
    return LoadHistory(t, running, queued, micro if bool(np.isfinite(micro).any()) else None)
