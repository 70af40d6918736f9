"""Writes PyTorch profiler (Kineto) traces of a simulated pipeline, one file per rank.

The layout follows what libkineto's ChromeTraceLogger writes (output_json.cpp):
`schemaVersion`, `deviceProperties`, the metadata members (`distributedInfo`,
...), `displayTimeUnit`, `baseTimeNanoseconds`, then `traceEvents` with one
event per few lines, timestamps in microseconds with three decimals relative
to the base time, and finally `traceName`. Kernels are complete events with
`cat: kernel`, `pid` = device, `tid` = stream and the CUPTI args; each kernel
has its `cudaLaunchKernel` runtime event and an `ac2g` flow pair.

The pipeline: P stages (TP ranks each), `in_flight` micro-batches cycling
through them; each stage step is `kernels_per_step` compute kernels with launch
gaps, then an NCCL send; a stage waiting for its input spins in an NCCL
receive kernel. Ground truth (compute-kernel busy time per rank, in ns) is
returned so tests can check what the reader measures.
"""

from __future__ import annotations

import gzip
import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

BASE_NS = 1_760_000_000_000_000_000
GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
    "_execute_segment_k_off_kernel__5x_cublas"
)
ATTN = "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, 4u, 8u>(flashinfer::Params)"
NORM = (
    "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, "
    "float, int, int)"
)
SIDE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
)
SEND = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
RECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class PipelineSpec:
    pp: int = 4
    tp: int = 1
    in_flight: int = 1  # micro-batches in flight: 1 = serialized
    duration_s: float = 2.0
    stage_us: float = 10_000.0  # compute time of one stage step
    kernels_per_step: int = 2
    launch_gap_us: float = 8.0
    link_us: float = 150.0  # send latency between stages
    loop_us: float = 300.0  # sampling and scheduling before the next step at stage 0
    start_us: float = 50_000.0
    side_stream: bool = True  # a small kernel on a second stream inside a main one
    gzip: bool = False
    distributed_info: bool = True
    process_groups: bool = True
    naming: str = "sglang"  # "sglang" (-TP-t-PP-p), "vllm" (rankN), "plain" (trace_N)
    straggle_stage: int | None = None  # this stage computes 1.5x longer


@dataclass
class RankTruth:
    compute_ns: int = 0
    comm_ns: int = 0
    compute_starts_ns: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Generated:
    paths: list[Path]
    truth: dict[int, RankTruth]
    spec: PipelineSpec
    span_ns: int


@dataclass
class _Rank:
    rank: int
    kernels: list[tuple[int, int, str, int]] = field(default_factory=list)  # ts, dur, name, stream
    truth: RankTruth = field(default_factory=RankTruth)


def _schedule(spec: PipelineSpec) -> dict[int, _Rank]:
    """Run the micro-batches through the stages; kernel lists per rank, in ns."""
    ranks = {r: _Rank(r) for r in range(spec.pp * spec.tp)}
    stage_ns = [
        int(spec.stage_us * (1.5 if s == spec.straggle_stage else 1.0) * 1000)
        for s in range(spec.pp)
    ]
    gap = int(spec.launch_gap_us * 1000)
    link = int(spec.link_us * 1000)
    loop = int(spec.loop_us * 1000)
    t0 = int(spec.start_us * 1000)
    end = t0 + int(spec.duration_s * 1e9)
    free = [t0] * spec.pp
    ready = [(t0 + m * 1000, m) for m in range(spec.in_flight)]
    heapq.heapify(ready)
    while ready:
        t, m = heapq.heappop(ready)
        if t >= end:
            continue
        for s in range(spec.pp):
            start = max(t, free[s])
            step = _step(stage_ns[s], spec.kernels_per_step, gap)
            for tp in range(spec.tp):
                r = ranks[s * spec.tp + tp]
                if start > free[s]:  # waited for input: NCCL receive spins
                    r.kernels.append((free[s], start - free[s], RECV, 7 + 16))
                    r.truth.comm_ns += start - free[s]
                k_start = start
                r.truth.compute_starts_ns.append(start)
                for i, dur in enumerate(step):
                    name = (GEMM, ATTN, NORM)[i % 3]
                    r.kernels.append((k_start, dur, name, 7))
                    r.truth.compute_ns += dur
                    if spec.side_stream and i == 0 and dur > 4000:
                        r.kernels.append((k_start + 1000, dur - 2000, SIDE, 13))
                    k_start += dur + gap
                if spec.tp > 1:
                    r.kernels.append((k_start, 30_000, ALLREDUCE, 7 + 16))
                    r.truth.comm_ns += 30_000
            done = start + sum(step) + gap * (len(step) - 1) + (30_000 + gap if spec.tp > 1 else 0)
            for tp in range(spec.tp):
                if s < spec.pp - 1:
                    ranks[s * spec.tp + tp].kernels.append((done, 20_000, SEND, 7 + 16))
                    ranks[s * spec.tp + tp].truth.comm_ns += 20_000
            free[s] = done + (20_000 if s < spec.pp - 1 else 0)
            t = done + link
        heapq.heappush(ready, (t + loop, m))
    for r in ranks.values():
        r.kernels.sort()
    return ranks


def _step(stage_ns: int, n: int, gap_ns: int) -> list[int]:
    busy = stage_ns - gap_ns * (n - 1)
    base = busy // n
    return [base] * (n - 1) + [busy - base * (n - 1)]


def _ts(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _header(spec: PipelineSpec, rank: int, base_ns: int) -> str:
    world = spec.pp * spec.tp
    props = (
        '\n      {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512, '
        '"computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, '
        '"maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32, '
        '"sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536, '
        '"sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}'
    )
    out = ["\n  {", '\n    "schemaVersion": 1,', f'\n    "deviceProperties": [{props}\n    ],']
    if spec.distributed_info:
        pgs = [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": world,
                "ranks": list(range(world)),
            }
        ]
        if spec.process_groups and spec.tp > 1:
            tp_group = rank // spec.tp
            pgs.append(
                {
                    "pg_name": "1",
                    "pg_desc": "undefined",
                    "backend_config": "cuda:nccl",
                    "pg_size": spec.tp,
                    "ranks": list(range(tp_group * spec.tp, (tp_group + 1) * spec.tp)),
                }
            )
            pgs.append(
                {
                    "pg_name": "2",
                    "pg_desc": "undefined",
                    "backend_config": "cuda:nccl",
                    "pg_size": spec.pp,
                    "ranks": list(range(rank % spec.tp, world, spec.tp)),
                }
            )
        info = {
            "backend": "nccl",
            "rank": rank,
            "world_size": world,
            "pg_count": len(pgs),
            "pg_config": pgs,
            "nccl_version": "2.21.5",
        }
        out.append(f'\n      "distributedInfo": {json.dumps(info)},')
    out.append('\n      "record_shapes": 0,')
    out.append('\n      "with_stack": 1,')
    out.append('\n      "cuda_runtime_version": 12040,')
    out.append('\n  "displayTimeUnit": "ms",')
    out.append(f'\n  "baseTimeNanoseconds": {base_ns},')
    out.append('\n  "traceEvents": [')
    return "".join(out)


def _events(r: _Rank, pid: int, shift_ns: int) -> Iterator[str]:
    yield (
        f'\n  {{\n    "name": "process_name", "ph": "M", "ts": {_ts(0)}, "pid": {pid}, "tid": 0,'
        '\n    "args": {\n      "name": "python"\n    }\n  },'
    )
    yield (
        '\n  {\n    "name": "process_name", "ph": "M", "ts": 0.000, "pid": 0, "tid": 0,'
        '\n    "args": {\n      "name": "GPU 0"\n    }\n  },'
    )
    corr = 1000
    for ts_global, dur, name, stream in r.kernels:
        ts = ts_global - shift_ns
        corr += 1
        launch = max(ts - 40_000, 0)
        yield (
            f'\n  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", '
            f'"pid": {pid}, "tid": {pid},\n    "ts": {_ts(launch)}, "dur": {_ts(3_500)},'
            f'\n    "args": {{\n      "External id": {corr}, "cbid": 211, '
            f'"correlation": {corr}\n    }}\n  }},'
        )
        yield (
            f'\n  {{\n    "ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream},'
            f'\n    "ts": {_ts(ts)}, "dur": {_ts(dur)},\n    "args": {{'
            f'\n      "External id": {corr},'
            f'\n      "queued": 0, "device": 0, "context": 1,\n      "stream": {stream}, '
            f'"correlation": {corr},\n      "registers per thread": 168,\n      '
            f'"shared memory": 232448,\n      "blocks per SM": 1.000000,\n      '
            f'"warps per SM": 12.000000,\n      "grid": [132, 1, 1],\n      "block": [384, 1, 1],'
            f'\n      "est. achieved occupancy %": 19\n    }}\n  }},'
        )
        yield (
            f'\n  {{\n    "ph": "s", "id": {corr}, "pid": {pid}, "tid": {pid}, "ts": {_ts(launch)},'
            f'\n    "cat": "ac2g", "name": "ac2g"\n  }},'
        )
        yield (
            f'\n  {{\n    "ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {_ts(ts)},'
            f'\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }},'
        )


def _footer(end_ns: int, trace_name: str) -> str:
    return (
        f'\n  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", '
        f'"ts": {_ts(end_ns)}\n  }}\n  ],\n  "traceName": "{trace_name}"\n}}'
    )


def _filename(spec: PipelineSpec, rank: int) -> str:
    ext = ".json.gz" if spec.gzip else ".json"
    if spec.naming == "sglang":
        tp, pp = rank % spec.tp, rank // spec.tp
        return f"1760000000.123-TP-{tp}" + (f"-PP-{pp}" if spec.pp > 1 else "") + ".trace" + ext
    if spec.naming == "vllm":
        return f"host_rank{rank}.1760000000123.pt.trace{ext}"
    return f"trace_{rank}{ext}"


def _open(path: Path, compressed: bool) -> IO[str]:
    if compressed:
        return gzip.open(path, "wt", encoding="utf-8")
    return open(path, "w", encoding="utf-8")


def write_pipeline_traces(directory: Path, spec: PipelineSpec) -> Generated:
    """Write one trace per rank into `directory`; return the paths and the ground truth."""
    directory.mkdir(parents=True, exist_ok=True)
    ranks = _schedule(spec)
    end_ns = int(spec.start_us * 1000) + int(spec.duration_s * 1e9)
    paths: list[Path] = []
    for r, data in ranks.items():
        # Each process has its own profiler base time; events are relative to it.
        shift = 1_234_567 * r
        path = directory / _filename(spec, r)
        with _open(path, spec.gzip) as f:
            f.write(_header(spec, r, BASE_NS + shift))
            for chunk in _events(data, 4242 + r, shift):
                f.write(chunk)
            f.write(_footer(end_ns + 200_000 - shift, str(path)))
        paths.append(path)
    return Generated(paths, {r: d.truth for r, d in ranks.items()}, spec, end_ns)
