"""The detector's scenario suite: simulated cases with verdicts written from the physics.

Each case names a simulator scenario (plus overrides), how it is observed
(duration, poll interval, seed) and through which format it reaches the
detector: the bubblewatch trace, or an nvidia-smi CSV / dcgmi dmon capture
holding only the fields those tools give. The expected verdict follows from
the scenario's configuration (depth, graphs, load, faults, parallelism), never
from the detector's output. Used by tests/detect/test_suite.py and
benchmarks/accuracy.py.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from bubblewatch.detect import Diagnosis
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sources.smi_writer import write_nvidia_smi

VIA_TRACE, VIA_SMI, VIA_DCGMI = "trace", "nvidia-smi", "dcgmi"


@dataclass(frozen=True)
class Case:
    """One simulated situation and the verdict its physics implies."""

    scenario: str
    expected: str
    why: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float = 60.0
    interval_s: float = 1.0
    seed: int = 0
    via: str = VIA_TRACE
    load_limited: bool | None = None
    drop_topology: bool = False
    tag: str = ""
    # A finding that must be present (primary or not), and evidence it must carry.
    finding: str | None = None
    finding_evidence: Mapping[str, Any] = field(default_factory=dict)
    # A training pipeline's schedule given to the detector: (kind, micro-batches[, virtual]).
    schedule: tuple[str, int] | tuple[str, int, int] | None = None
    # The nvidia-smi capture leaves out power.limit (the GPU model's name stays).
    no_power_limit: bool = False
    # The nvidia-smi capture holds only timestamp, index, power.draw and utilization.gpu.
    bare_smi: bool = False

    @property
    def name(self) -> str:
        parts = [self.scenario, f"{self.interval_s:g}s", f"seed{self.seed}"]
        if self.tag:
            parts.append(self.tag)
        if self.via != VIA_TRACE:
            parts.append(self.via)
        if self.drop_topology:
            parts.append("no-topology")
        if self.no_power_limit:
            parts.append("no-limit")
        if self.bare_smi:
            parts.append("bare")
        return "/".join(parts)

    def check(self, d: Diagnosis) -> tuple[bool, str]:
        """Whether the diagnosis is what the physics implies, and if not, what differs."""
        if d.verdict.value != self.expected:
            return False, f"verdict {d.verdict.value}"
        if self.load_limited is not None and d.load_limited is not self.load_limited:
            return False, f"load_limited {d.load_limited}"
        if self.finding is not None:
            found = next((f for f in d.findings if f.verdict.value == self.finding), None)
            if found is None:
                return False, f"no {self.finding} finding"
            for k, v in self.finding_evidence.items():
                if found.evidence.get(k) != v:
                    return False, f"{self.finding} {k} = {found.evidence.get(k)!r}"
        return True, ""


def diagnose_case(case: Case, rec: Recording) -> Diagnosis:
    """The detector on a case's recording, with the schedule the case gives."""
    from bubblewatch.detect import diagnose
    from bubblewatch.model.schedule import PipelineSchedule

    sched = None if case.schedule is None else PipelineSchedule(*case.schedule)
    return diagnose(rec, schedule=sched)


_AS_GOOD = {"schedule_judgement": "as_good"}


def _below(cause: str, stage: int | None) -> dict[str, Any]:
    return {"schedule_judgement": "below", "excess_cause": cause, "excess_stage": stage}


_TRAINING_CASES: tuple[Case, ...] = (
    Case(
        "pp4-1f1b-m4",
        "healthy",
        "1F1B p=4 m=4, equal stages: 43% bubble by schedule and nothing more",
        interval_s=0.1,
        seed=1,
        schedule=("1f1b", 4),
        finding="healthy",
        finding_evidence=_AS_GOOD,
    ),
    Case(
        "pp4-1f1b-m4",
        "healthy",
        "1F1B p=4 m=4 at 0.2 s",
        interval_s=0.2,
        seed=2,
        schedule=("1f1b", 4),
        finding="healthy",
        finding_evidence=_AS_GOOD,
    ),
    Case(
        "pp4-interleaved",
        "healthy",
        "interleaved 1F1B v=2 m=8: 16% by schedule",
        interval_s=0.1,
        seed=1,
        schedule=("interleaved", 8, 2),
        finding="healthy",
        finding_evidence=_AS_GOOD,
    ),
    Case(
        "pp4-1f1b-imbalanced",
        "imbalanced",
        "the last stage takes 1.5x: it paces the pipeline, the bubble exceeds the schedule's",
        interval_s=0.1,
        seed=1,
        schedule=("1f1b", 8),
        finding="below_schedule",
        finding_evidence=_below("heavy_last_stage", 3),
    ),
    Case(
        "pp4-1f1b-imbalanced",
        "imbalanced",
        "last stage 1.5x, 0.2 s",
        interval_s=0.2,
        seed=2,
        schedule=("1f1b", 8),
        finding="imbalanced",
        finding_evidence={"imbalanced_stage": 3},
    ),
    Case(
        "pp4-1f1b-throttled",
        "straggler",
        "GPU 2 power-capped to 70% clock: its stage paces the pipeline",
        interval_s=0.1,
        seed=1,
        schedule=("1f1b", 8),
        finding="below_schedule",
        finding_evidence=_below("throttled_stage", 2),
    ),
    Case(
        "pp4-1f1b-loader",
        "below_schedule",
        "stage 0 waits 100 ms a step on its data loader (no kernel) while the others spin",
        interval_s=0.1,
        seed=1,
        schedule=("1f1b", 8),
        finding="below_schedule",
        finding_evidence=_below("data_loader_stall", 0),
    ),
    Case(
        "pp4-1f1b-throttled",
        "straggler",
        "GPU 2 at 70% clock, dcgmi dmon (no throttle reasons: the clock tells)",
        interval_s=0.1,
        seed=3,
        via=VIA_DCGMI,
        schedule=("1f1b", 8),
        finding="below_schedule",
        finding_evidence=_below("throttled_stage", 2),
    ),
    Case(
        "pp4-1f1b-loader",
        "below_schedule",
        "data-loader stall, dcgmi dmon at 0.2 s",
        interval_s=0.2,
        seed=2,
        via=VIA_DCGMI,
        schedule=("1f1b", 8),
        finding="below_schedule",
        finding_evidence=_below("data_loader_stall", 0),
    ),
    Case(
        "pp4-1f1b",
        "below_schedule",
        "15 ms point-to-point sends between 20 ms stages: stages wait in transfers",
        overrides={"job.micro_batches": 8, "job.send_s": 0.015},
        interval_s=0.1,
        seed=2,
        tag="slow-p2p",
        schedule=("1f1b", 8),
        finding="below_schedule",
        finding_evidence=_below("communication_wait", None),
    ),
)

SER = "serialized"
_SER = "depth 0: one micro-batch in flight, one stage computes at a time"
CASES: tuple[Case, ...] = (
    # The seed: PP8, depth 0, graphs off, C=8 (a configuration problem under load).
    Case("pp8-serialized", SER, _SER + ", C=8", load_limited=False),
    Case("pp8-serialized", SER, _SER, interval_s=0.1, seed=1, load_limited=False),
    Case("pp8-serialized", SER, _SER, interval_s=2.0, duration_s=120.0, seed=2),
    Case(
        "pp8-serialized",
        "not_pipeline",
        "no topology at 0.5 s: decode stage times (ms) are far below the sampling, the stages "
        "rise and fall in phase and nothing shows a pipeline (a pipeline verdict needs evidence)",
        interval_s=0.5,
        seed=3,
        drop_topology=True,
    ),
    Case(
        "pp8-serialized",
        SER,
        _SER + "; no topology at 0.2 s: neighbouring stages lead one another, a stagger",
        interval_s=0.2,
        seed=3,
        drop_topology=True,
    ),
    Case("pp8-serialized", SER, _SER, interval_s=1.0, seed=4, via=VIA_SMI),
    Case("pp8-serialized", SER, _SER, interval_s=0.5, seed=5, via=VIA_DCGMI),
    Case(
        "pp8-serialized",
        SER,
        _SER + "; CUDA graphs on changes the stage time, not the serialization",
        overrides={"parallel.cuda_graph": True},
        tag="graphs-on",
        load_limited=False,
    ),
    Case(
        "pp8-serialized",
        SER,
        "depth 1 at C=8: the eight requests still share one slot (SGLang's per-slot cap)",
        overrides={"parallel.pp_async_batch_depth": 1, "parallel.cuda_graph": True},
        tag="depth1",
        interval_s=0.5,
    ),
    # One request can never fill a pipeline: serialized and load-limited.
    Case("pp8-single-request", SER, "C=1: inherent to PP", load_limited=True),
    Case("pp8-single-request", SER, "C=1", interval_s=0.2, seed=1, load_limited=True),
    Case("pp8-single-request", SER, "C=1", interval_s=1.0, seed=2, via=VIA_DCGMI),
    # Per-slot cap 1 (depth 8, graphs on): one request per slot, every stage busy together.
    Case("pp8-async", "healthy", "cap 1, graphs on: micro-batches fill all stages"),
    Case("pp8-async", "healthy", "depth 8", interval_s=0.1, seed=1),
    Case("pp8-async", "healthy", "depth 8", interval_s=2.0, duration_s=120.0, seed=2),
    Case("pp8-async", "healthy", "depth 8", interval_s=1.0, seed=3, via=VIA_SMI),
    Case("pp8-async", "healthy", "depth 8", interval_s=0.5, seed=4, via=VIA_DCGMI),
    Case("pp2-async", "healthy", "PP2 depth 2: both stages busy"),
    Case("pp2-async", "healthy", "PP2", interval_s=0.1, seed=1),
    # Depth 8, graphs off: stages hold the pipeline with SMs mostly empty.
    Case("pp8-graphs-off", "launch_bound", "graphs off: many small kernels, CPU launch gaps"),
    Case("pp8-graphs-off", "launch_bound", "graphs off", interval_s=0.1, seed=1),
    Case("pp8-graphs-off", "launch_bound", "graphs off", interval_s=0.5, seed=2, via=VIA_DCGMI),
    # Tensor parallel and data parallel: no stages.
    Case("tp8", "not_pipeline", "TP8: one stage of 8 GPUs"),
    Case("tp8", "not_pipeline", "TP8", interval_s=0.1, seed=1, drop_topology=True),
    Case("tp8", "not_pipeline", "TP8", interval_s=1.0, seed=2, via=VIA_SMI),
    Case("dp8", "not_pipeline", "DP8: eight independent single-GPU engines"),
    Case("dp8", "not_pipeline", "DP8", interval_s=0.5, seed=1, drop_topology=True),
    # No requests: not a bubble.
    Case("idle", "idle", "no requests: nothing runs"),
    Case("idle", "idle", "no requests", interval_s=2.0, seed=1),
    Case("idle", "idle", "no requests", interval_s=1.0, seed=2, via=VIA_SMI),
    # Faults.
    Case("pp4-imbalanced", "imbalanced", "one stage holds clearly more layers"),
    Case("pp4-imbalanced", "imbalanced", "heavy stage", interval_s=0.1, seed=1),
    Case("pp4-throttled", "straggler", "one GPU power-capped: lower clock, SwPowerCap"),
    Case("pp4-throttled", "straggler", "power cap", interval_s=0.5, seed=1),
    # Too little to judge: say so rather than guess.
    Case(
        "pp8-serialized",
        "insufficient_data",
        "a 6 s window is shorter than 10 s",
        duration_s=6.0,
        tag="short",
    ),
    # PP x TP and large PP.
    Case("pp4x2", "healthy", "PP4 x TP2, per-slot cap 4, graphs on: stages busy together"),
    Case(
        "pp4x2",
        SER,
        "PP4 x TP2, default per-slot cap: all requests in one slot, serialized; no topology "
        "given, TP pairs and order inferred",
        overrides={"parallel.pp_async_batch_depth": 0, "parallel.pp_max_micro_batch_size": None},
        interval_s=0.1,
        seed=1,
        drop_topology=True,
        tag="one-slot",
    ),
    Case("pp16-serialized", SER, _SER + ", 16 stages", load_limited=False),
    Case("pp16-serialized", SER, _SER + ", 16 stages", interval_s=0.2, seed=1),
    # Training jobs, calibrated to the public H100 recordings (benchmarks/real_data_manifest.yaml).
    Case("dp8-training", "not_pipeline", "DDP: every GPU computes in phase, no stages"),
    Case("dp8-training", "not_pipeline", "DDP, 10 Hz", interval_s=0.1, seed=1),
    Case("dp8-training", "not_pipeline", "DDP, power only", interval_s=0.5, seed=2, via=VIA_SMI),
    Case(
        "dp8-checkpoint-stall",
        "collective_wait",
        "rank 0 writes a checkpoint every step while ranks 1-7 spin in the next collective",
        interval_s=0.1,
        finding="collective_wait",
        finding_evidence={"holding_gpus": [0]},
    ),
    Case(
        "dp8-checkpoint-stall",
        "collective_wait",
        "the same seen by nvidia-smi: power and utilization.gpu only",
        interval_s=0.1,
        seed=1,
        via=VIA_SMI,
        finding="collective_wait",
        finding_evidence={"holding_gpus": [0]},
    ),
    Case(
        "dp8-dataloader-stall",
        "collective_wait",
        "rank 3's loader stalls 2 s every 10 steps: a collective wait a third of the time, "
        "which leads (a job-level problem before the job's shape)",
        interval_s=0.5,
        finding="collective_wait",
        finding_evidence={"holding_gpus": [3]},
    ),
    Case(
        "dp8-hang",
        "collective_wait",
        "rank 5 hangs after 15 s: the others spin for good",
        finding="collective_wait",
        finding_evidence={"holding_gpus": [5]},
    ),
    Case("fsdp8-offload", "underfed", "CPU offload: short kernel bursts between host transfers"),
    Case("fsdp8-offload", "underfed", "CPU offload, 10 Hz", interval_s=0.1, seed=1),
    Case("idle-loaded", "idle", "model loaded, nothing runs: utilization.gpu 0 at 120 W"),
    Case(
        "idle-loaded",
        "idle",
        "model loaded, nothing runs, nvidia-smi with no power limit in the file",
        interval_s=0.1,
        seed=1,
        via=VIA_SMI,
        no_power_limit=True,
    ),
    Case(
        "idle-loaded",
        "idle",
        "model loaded, nothing runs: nvidia-smi power.draw and utilization.gpu only (0% at "
        "120 W, no name to know the card's limit by)",
        seed=2,
        via=VIA_SMI,
        bare_smi=True,
    ),
    Case(
        "idle",
        "idle",
        "no requests: nvidia-smi power.draw and utilization.gpu only",
        seed=3,
        via=VIA_SMI,
        bare_smi=True,
    ),
    Case(
        "pp2x8-gpipe",
        "healthy",
        "TP8 x PP2 GPipe m=4: bubble 20% by schedule; TP stages top out at SM 0.58",
        interval_s=0.1,
        schedule=("gpipe", 4),
    ),
    Case(
        "pp2x8-gpipe",
        "healthy",
        "TP8 x PP2 GPipe m=4 at 1 s: samples average the stages' turns, so the SM level is "
        "unresolved and two micro-batches in flight cannot be ruled out: not serialized",
        interval_s=1.0,
        seed=3,
    ),
    Case(
        "pp2x8-gpipe",
        "healthy",
        "TP8 x PP2 GPipe m=4 from power and utilization.gpu alone",
        interval_s=0.1,
        seed=1,
        via=VIA_SMI,
    ),
    Case(
        "pp2x8-gpipe",
        "healthy",
        "TP8 x PP2 GPipe without a topology: the two TP8 groups take turns, a stagger",
        interval_s=0.1,
        seed=2,
        drop_topology=True,
    ),
    Case("pp4-1f1b", "healthy", "1F1B with 16 micro-batches: bubble 16% by schedule"),
    Case("pp4-1f1b", "healthy", "1F1B, 10 Hz", interval_s=0.1, seed=1, schedule=("1f1b", 16)),
    Case(
        "layersplit4",
        SER,
        "one process split layer-wise over 4 GPUs, one prompt at a time, after loading: the "
        "GPUs take turns (nvidia-smi power.draw and utilization.gpu only, no topology)",
        duration_s=300.0,
        interval_s=0.1,
        via=VIA_SMI,
        bare_smi=True,
        drop_topology=True,
    ),
    Case(
        "layersplit4",
        "idle",
        "a layer split's loading phase alone: every GPU at 0% and ~55 W",
        duration_s=55.0,
        interval_s=0.1,
        seed=1,
        via=VIA_SMI,
        bare_smi=True,
        drop_topology=True,
    ),
    Case("pp4-gpipe-m1", SER, "GPipe fed one micro-batch: one micro-batch in flight"),
    Case("pp4-gpipe-m1", SER, "GPipe m=1, 10 Hz", interval_s=0.1, seed=1),
    # Training pipelines judged against their schedule (the schedule given, as discovered).
    *_TRAINING_CASES,
)


def run_case(case: Case, workdir: str) -> Recording:
    """Simulate, observe, and pass the recording through the case's file format."""
    from dataclasses import replace

    from bubblewatch.sim import load_scenario, observe, simulate
    from bubblewatch.sources.load import load_recording
    from bubblewatch.sources.trace import write_trace

    sc = load_scenario(case.scenario)
    if case.overrides:
        sc = apply_overrides(sc, dict(case.overrides))
    res = simulate(sc, duration_s=case.duration_s, seed=case.seed)
    rec = observe(res, interval_s=case.interval_s, seed=case.seed)
    safe = case.name.replace("/", "_")
    if case.via == VIA_TRACE:
        path = os.path.join(workdir, safe + ".jsonl")
        write_trace(path, rec)
        out = load_recording(path, format="trace")
    elif case.via == VIA_SMI:
        path = os.path.join(workdir, safe + ".csv")
        write_nvidia_smi(rec, path, power_limit=not case.no_power_limit, bare=case.bare_smi)
        out = load_recording(path, format="nvidia-smi")
        out = replace(out, topology=rec.topology, load=rec.load)
    else:
        path = os.path.join(workdir, safe + ".dmon")
        write_dcgmi(rec, path)
        out = load_recording(path, format="dcgmi")
        out = replace(out, topology=rec.topology, load=rec.load)
    if case.drop_topology:
        out = replace(out, topology=None)
    return out


def write_dcgmi(rec: Recording, path: str) -> None:
    """What `dcgmi dmon -e 155,203,1002,100 -d MS` prints: one row per GPU per tick, no times."""
    gpus = sorted(rec.series)
    n = min(len(rec.series[g]) for g in gpus)
    t0 = min(float(rec.series[g].t_s[0]) for g in gpus)
    dt = float(np.median(np.diff(rec.series[gpus[0]].t_s)))
    start = datetime.fromtimestamp(t0, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    cols = [
        (Metric.POWER_AVG_W, "{:.3f}", 1.0),
        (Metric.KERNEL_BUSY_RATIO, "{:.0f}", 100.0),
        (Metric.SM_ACTIVE_RATIO, "{:.3f}", 1.0),
        (Metric.SM_CLOCK_MHZ, "{:.0f}", 1.0),
    ]
    out = [f"# start={start}Z dcgmi dmon -e 155,203,1002,100 -d {round(dt * 1000)}"]
    header = "#Entity   POWER             GPUTL             SMACT        SMCLK        "
    units = "ID         W                                                           "
    for i in range(n):
        if i % 20 == 0:  # dmon repeats its header every so often
            out += [header, units]
        for g in gpus:
            s = rec.series[g]
            cells = []
            for m, fmt, scale in cols:
                arr = s.values.get(m)
                val = None if arr is None else float(arr[i])
                ok = val is not None and math.isfinite(val)
                cells.append(f"{fmt.format(val * scale) if ok else 'N/A':<13}")
            out.append(f"GPU {g:<5} " + "".join(cells))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
