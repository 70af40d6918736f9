"""Writes PyTorch profiler traces of pipeline *training*, one file per rank.

Shapes follow real torch.profiler output (checked against the traces in
HolisticTraceAnalysis tests/data, commit f4d0062c): `distributedInfo` with
`pg_config` entries {pg_name, pg_desc, backend_config, pg_size, ranks}, GPU
kernels as `cat: kernel` complete events (pid = device, tid = stream), and
`ProfilerStep#N` as `cat: user_annotation` complete events on the CPU thread.

The schedule: p stages, m micro-batches a step, forward F_s and backward
B_s = 2 F_s per micro-batch, GPipe (all forwards, then all backwards) or
1F1B (p-s-1 warm-up forwards, then one forward one backward); a forward needs
the previous stage's, a backward the next stage's; an idle stage spins in an
NCCL SendRecv kernel. After the last backward every stage runs the optimizer
(`optimizer_us`); the next step starts when all are done. Ground truth is the
generator's own bookkeeping: the compute time each stage was given per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

BASE_NS = 1_760_000_000_000_000_000
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas"
BWD = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>"
OPT = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class TrainSpec:
    pp: int = 4
    micro_batches: int = 4
    schedule: str = "1f1b"  # or "gpipe"
    steps: int = 3
    forward_us: float = 2_000.0
    slow_stage: int | None = None  # this stage's compute takes `slow_factor` as long
    slow_factor: float = 1.5
    link_us: float = 0.0  # activation transfer between stages
    optimizer_us: float = 0.0
    pg_desc: str = "PIPELINE_MODEL_PARALLEL_GROUP"
    start_us: float = 10_000.0


@dataclass
class Truth:
    """Per step: its window (µs on the common clock) and each stage's compute time (µs)."""

    windows: list[tuple[float, float]] = field(default_factory=list)
    stage_compute_us: list[list[float]] = field(default_factory=list)

    def bubble(self, step: int) -> float:
        lo, hi = self.windows[step]
        p = len(self.stage_compute_us[step])
        return 1.0 - sum(self.stage_compute_us[step]) / (p * (hi - lo))


def _order(spec: TrainSpec, s: int) -> list[tuple[str, int]]:
    m, p = spec.micro_batches, spec.pp
    if spec.schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    warm = min(p - s - 1, m)
    ops = [("F", j) for j in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            ops.append(("F", f))
            f += 1
        ops.append(("B", b))
        b += 1
    return ops


def _step(spec: TrainSpec, t0: float, kernels: dict[int, list[tuple[float, float, str, int]]]):
    p = spec.pp
    fwd = [spec.forward_us * (spec.slow_factor if s == spec.slow_stage else 1.0) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}
    free = [t0] * p
    orders = [_order(spec, s) for s in range(p)]
    pos = [0] * p
    compute = [0.0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pos[s] >= len(orders[s]):
                continue
            kind, j = orders[s][pos[s]]
            if kind == "F":
                dep = t0 if s == 0 else done.get(("F", s - 1, j))
            else:
                dep = done.get(("F", s, j)) if s == p - 1 else done.get(("B", s + 1, j))
            if dep is None:
                continue
            ready = dep + (
                spec.link_us if (kind == "F" and s > 0) or (kind == "B" and s < p - 1) else 0
            )
            start = max(free[s], ready)
            if start > free[s]:
                kernels[s].append((free[s], start - free[s], SENDRECV, 20))  # spin in a recv
            dur = fwd[s] if kind == "F" else 2 * fwd[s]
            kernels[s].append((start, dur, GEMM if kind == "F" else BWD, 7))
            compute[s] += dur
            free[s] = done[(kind, s, j)] = start + dur
            pos[s] += 1
            progressed = True
        assert progressed, "schedule deadlock"
    end = max(free)
    for s in range(p):
        if end > free[s]:
            kernels[s].append((free[s], end - free[s], SENDRECV, 20))  # waits for the flush
        if spec.optimizer_us:
            kernels[s].append((end, spec.optimizer_us, OPT, 7))
            compute[s] += spec.optimizer_us
    return end + spec.optimizer_us, compute


def write_training_traces(directory: Path, spec: TrainSpec) -> tuple[list[Path], Truth]:
    """One trace per rank (rank = stage); the ground truth per step."""
    directory.mkdir(parents=True, exist_ok=True)
    kernels: dict[int, list[tuple[float, float, str, int]]] = {s: [] for s in range(spec.pp)}
    truth = Truth()
    t = spec.start_us
    for _ in range(spec.steps):
        end, compute = _step(spec, t, kernels)
        truth.windows.append((t, end))
        truth.stage_compute_us.append(compute)
        t = end
    paths = []
    for rank in range(spec.pp):
        shift_us = 1_234.567 * rank  # each process has its own profiler base time
        events: list[dict[str, object]] = []
        for n, (lo, hi) in enumerate(truth.windows):
            events.append({
                "ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n + 10}",
                "pid": 4242 + rank, "tid": 4242 + rank, "ts": round(lo - 30.0 - shift_us, 3),
                "dur": round(hi - lo, 3), "args": {"External id": n + 1},
            })  # fmt: skip
        for i, (ts, dur, name, stream) in enumerate(sorted(kernels[rank])):
            events.append({
                "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                "ts": round(ts - shift_us, 3), "dur": round(dur, 3),
                "args": {"External id": 1000 + i, "device": 0, "stream": stream,
                         "correlation": 1000 + i},
            })  # fmt: skip
        groups = [
            {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
             "pg_size": spec.pp, "ranks": list(range(spec.pp))},
            {"pg_name": "1", "pg_desc": spec.pg_desc, "backend_config": "cuda:nccl",
             "pg_size": spec.pp, "ranks": list(range(spec.pp))},
        ]  # fmt: skip
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
            "distributedInfo": {
                "backend": "nccl",
                "rank": rank,
                "world_size": spec.pp,
                "pg_count": 2,
                "pg_config": groups,
                "nccl_version": "2.21.5",
            },
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_NS + int(shift_us * 1000),
            "traceEvents": events,
            "traceName": f"rank-{rank}.pt.trace.json",
        }
        path = directory / f"rank-{rank}.pt.trace.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths, truth
