"""`simulate_training`: a training job's GPUs over time, from its schedule, stage times and stalls.

Steps follow each other; each is the step template (training_schedule.py)
stretched by a small random factor, then the data-parallel all-reduce, the
optimizer and the host gap. A fault (a throttled GPU) active when a step
starts slows its stage's compute by 1 / clock_ratio for that step (the
slowest GPU of a tensor-parallel group sets its pace); replicas wait for the
slowest at the all-reduce. Stalls are inserted between steps; `loading_s`
comes before the first. With `spin.enabled: false` a rank waiting for its turn
runs no kernel (a layer split in one process copies activations, no NCCL). Every GPU of
the job is, at each instant, computing (kernels with `kernel_gap_ratio` of
gaps), communicating (all-reduce), idle (no kernel: data loading, holding a
stall) or spinning (a kernel resident while it waits for a peer: pipeline
receives, a collective held by another rank). Binning, power, clocks and
observation are the serving simulator's (activity, power, observe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE
from bubblewatch.model.topology import Topology
from bubblewatch.sim.activity import Activity, empty_activity
from bubblewatch.sim.grid import cell_means
from bubblewatch.sim.result import LoadHistory, ReplicaTruth, SimResult, StageTruth, Truth
from bubblewatch.sim.runs import (
    DEFAULT_DT_S,
    build_timeline,
    check_run,
    gpu_uuid,
    truth_series,
)
from bubblewatch.sim.timeline import Timeline
from bubblewatch.sim.training_schedule import StepTemplate, step_template
from bubblewatch.sim.training_spec import StallSpec, TrainingJobSpec, TrainingScenario

FloatArray = npt.NDArray[np.float64]


@dataclass
class _Intervals:
    """Per-GPU lists of (start, end) by what the GPU does."""

    n_gpus: int
    compute: list[list[tuple[float, float]]] = field(default_factory=list)
    comm: list[list[tuple[float, float]]] = field(default_factory=list)
    idle: list[list[tuple[float, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.compute = [[] for _ in range(self.n_gpus)]
        self.comm = [[] for _ in range(self.n_gpus)]
        self.idle = [[] for _ in range(self.n_gpus)]


def stage_gpus(job: TrainingJobSpec, replica: int, stage: int) -> tuple[int, ...]:
    """GPU indices of a stage: rank = replica * p * tp + stage * tp + tp_rank."""
    base = replica * job.pp_size * job.tp_size + stage * job.tp_size
    return tuple(range(base, base + job.tp_size))


def simulate_training(
    sc: TrainingScenario, duration_s: float = 60.0, seed: int = 0, *, dt_s: float = DEFAULT_DT_S
) -> SimResult:
    """Simulate the training job `sc` for `duration_s` seconds; deterministic per seed."""
    job = sc.job
    check_run(duration_s, dt_s, job.n_gpus)
    n_cells = max(1, math.ceil(duration_s / dt_s - 1e-9))
    rng = np.random.default_rng([seed, 0x7A1])
    iv = _Intervals(job.n_gpus)
    template = step_template(job)
    steps = 0
    if job.idle:
        for g in range(job.n_gpus):
            iv.idle[g].append((0.0, duration_s))
    else:
        steps = _run_steps(sc, template, iv, duration_s, rng)
    act = _activity(sc, iv, n_cells, dt_s)
    timeline = build_timeline(sc, act, dt_s)
    if not sc.hardware.gpu_idle_reason:
        _keep_p0(timeline, sc)
    gpu = sc.hardware.gpu
    topologies = tuple(
        Topology(
            stages=tuple(stage_gpus(job, r, s) for s in range(job.pp_size)),
            engine=sc.launcher,
            source="sim",
            pipeline_id=f"replica-{r}" if job.dp_size > 1 else "",
            argv=sc.argv,
        )
        for r in range(job.dp_size)
        if job.pp_size > 1
    )
    return SimResult(
        scenario=sc,
        duration_s=duration_s,
        seed=seed,
        timeline=timeline,
        tokens_per_s=0.0,
        truth=_truth(job, template, act, timeline.field("power_w"), steps),
        gpus=tuple(
            GpuInfo(index=i, uuid=gpu_uuid(i), name=gpu.name, power_limit_w=gpu.power_limit_w)
            for i in range(job.n_gpus)
        ),
        topologies=topologies,
        load=LoadHistory(np.zeros(1), np.full(1, np.nan), np.full(1, np.nan)),
        truth_series=truth_series(
            sc,
            act,
            timeline,
            in_flight=[
                (np.zeros(1), np.full(1, _mean_in_flight(template) if not job.idle else 0.0))
            ]
            * job.dp_size,
            spin_sm_active_ratio=sc.spin.sm_active_ratio,
        ),
    )


def _keep_p0(timeline: Timeline, sc: TrainingScenario) -> None:
    """A GPU holding a CUDA context stays in P0 between kernels: no GpuIdle, no idle clock.

    Observed on H100 (B1 of the real-data manifest: model loaded, nothing running,
    throttle reasons 0 at 120 W); the serving model's 100 ms idle rule does not apply.
    """
    reasons = timeline.field("clocks_event_reasons")
    idle = (reasons.astype(np.int64) & CLOCKS_EVENT_GPU_IDLE) != 0
    reasons[idle] = (reasons[idle].astype(np.int64) & ~CLOCKS_EVENT_GPU_IDLE).astype(np.float32)
    clock = timeline.field("sm_clock_mhz")
    clock[idle] = sc.hardware.gpu.max_sm_clock_mhz


def _slow_stages(sc: TrainingScenario, replica: int, t: float) -> tuple[tuple[int, float], ...]:
    """(stage, compute-time factor) of the replica's stages holding a GPU throttled at `t`."""
    job = sc.job
    out: dict[int, float] = {}
    for f in sc.faults:
        if not f.start_s <= t < f.end_s:
            continue
        for s in range(job.pp_size):
            if f.gpu in stage_gpus(job, replica, s):
                out[s] = max(out.get(s, 1.0), 1.0 / f.clock_ratio)
    return tuple(sorted(out.items()))


def _run_steps(
    sc: TrainingScenario,
    template: StepTemplate,
    iv: _Intervals,
    duration_s: float,
    rng: np.random.Generator,
) -> int:
    """Lay steps and stalls end to end until `duration_s`; returns the number of steps."""
    job = sc.job
    templates: dict[tuple[tuple[int, float], ...], StepTemplate] = {(): template}
    t, k = min(job.loading_s, duration_s), 0
    if t > 0:  # loading the model: no kernel anywhere, nothing to wait for
        for g in range(job.n_gpus):
            iv.idle[g].append((0.0, t))
    loaders = sorted({g for r in range(job.dp_size) for g in stage_gpus(job, r, 0)})
    everyone = range(job.n_gpus)
    once_done: set[int] = set()
    while t < duration_s:
        for i, stall in enumerate(job.stalls):
            if _stall_due(stall, k, t, once_done, i):
                end = duration_s if stall.kind == "hang" else t + stall.duration_s
                for g in stall.holding_gpus:
                    iv.idle[g].append((t, end))
                t = end
                if t >= duration_s:
                    return k
        scale = max(0.5, 1.0 + job.step_jitter_ratio * float(rng.standard_normal()))
        makespan = 0.0
        for r in range(job.dp_size):
            slow = _slow_stages(sc, r, t) if sc.faults else ()
            if slow not in templates:
                templates[slow] = step_template(job, dict(slow))
            tpl = templates[slow]
            makespan = max(makespan, tpl.makespan_s)
            for s, a, b in zip(tpl.stage, tpl.start_s, tpl.end_s, strict=True):
                for g in stage_gpus(job, r, int(s)):
                    iv.compute[g].append((t + scale * a, t + scale * b))
        t += scale * makespan
        for g in everyone:
            if job.allreduce_s > 0:
                iv.comm[g].append((t, t + job.allreduce_s))
            if job.optimizer_s > 0:
                a = t + job.allreduce_s
                iv.compute[g].append((a, a + job.optimizer_s))
        t += job.allreduce_s + job.optimizer_s
        if job.host_gap_s > 0:
            for g in loaders:
                iv.idle[g].append((t, t + job.host_gap_s))
            t += job.host_gap_s
        k += 1
    return k


def _stall_due(stall: StallSpec, step: int, t: float, once_done: set[int], i: int) -> bool:
    if stall.every_steps > 0 and stall.kind != "hang":
        return step > 0 and step % stall.every_steps == 0 and t >= stall.start_s
    if i in once_done or t < stall.start_s:
        return False
    once_done.add(i)
    return True


def _cells(spans: list[tuple[float, float]], n_cells: int, dt_s: float) -> FloatArray:
    if not spans:
        return np.zeros(n_cells)
    a = np.array(spans, dtype=np.float64)
    return np.clip(cell_means(a[:, 0], a[:, 1], 1.0, n_cells, dt_s), 0.0, 1.0)


def _activity(sc: TrainingScenario, iv: _Intervals, n_cells: int, dt_s: float) -> Activity:
    job, spin_spec = sc.job, sc.spin
    act = empty_activity(job.n_gpus, n_cells)
    work = 1.0 - job.kernel_gap_ratio
    for g in range(job.n_gpus):
        compute = _cells(iv.compute[g], n_cells, dt_s)
        comm = np.minimum(_cells(iv.comm[g], n_cells, dt_s), 1.0 - compute)
        idle = np.minimum(_cells(iv.idle[g], n_cells, dt_s), 1.0 - compute - comm)
        waits = spin_spec.enabled and not job.idle  # a layer split: no NCCL receive to spin in
        spin = np.clip(1.0 - compute - comm - idle, 0.0, 1.0) if waits else np.zeros(n_cells)
        act.busy[g] = compute * work
        act.spin[g] = spin
        act.kernel_busy[g] = np.clip(compute * work + comm + spin, 0.0, 1.0)
        act.sm_active[g] = np.clip(
            compute * work * job.compute_sm_active_ratio
            + comm * job.comm_sm_active_ratio
            + spin * spin_spec.sm_active_ratio,
            0.0,
            1.0,
        )
        act.sm_occupancy[g] = np.clip(
            compute * work * job.compute_sm_occupancy_ratio
            + (comm + spin) * spin_spec.sm_occupancy_ratio,
            0.0,
            1.0,
        )
        act.tensor_active[g] = np.clip(compute * work * job.compute_tensor_active_ratio, 0.0, 1.0)
    return act


def _truth(
    job: TrainingJobSpec,
    template: StepTemplate,
    act: Activity,
    power_w: npt.NDArray[np.float32],
    steps: int,
) -> Truth:
    stages: list[StageTruth] = []
    replicas: list[ReplicaTruth] = []
    in_flight = _mean_in_flight(template) if not job.idle else 0.0
    for r in range(job.dp_size):
        busy_sum = 0.0
        for s in range(job.pp_size):
            g = list(stage_gpus(job, r, s))
            busy = float(act.busy[g].mean())
            busy_sum += busy
            stages.append(
                StageTruth(
                    replica=r,
                    stage=s,
                    gpus=tuple(g),
                    layers=0,
                    busy_ratio=busy,
                    spin_ratio=float(act.spin[g].mean()),
                    kernel_busy_ratio=float(act.kernel_busy[g].mean()),
                    sm_active_ratio=float(act.sm_active[g].mean()),
                    power_w=float(power_w[g].mean()),
                    micro_batches=steps * job.micro_batches,
                    mean_stage_time_s=job.forward_s(s),
                )
            )
        replicas.append(
            ReplicaTruth(
                replica=r,
                tokens=0,
                tokens_per_s=0.0,
                mean_in_flight=in_flight,
                max_in_flight=min(job.micro_batches, job.pp_size),
                micro_batch_cap=job.micro_batches,
                decode_tokens_per_micro_batch=0.0,
                mean_running=0.0,
                mean_queued=0.0,
                busy_sum=busy_sum,
            )
        )
    return Truth(tuple(stages), tuple(replicas))


def _mean_in_flight(template: StepTemplate) -> float:
    """Micro-batches between their first forward's start and last backward's end, on average."""
    span = template.makespan_s
    if span <= 0:
        return 0.0
    total = 0.0
    for mb in np.unique(template.micro_batch).tolist():
        sel = template.micro_batch == mb
        total += float(template.end_s[sel].max() - template.start_s[sel].min())
    return total / span
