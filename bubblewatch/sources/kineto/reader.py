"""One PyTorch profiler (Kineto) trace file to kernel intervals, streamed.

The file is Chrome trace JSON as `torch.profiler` exports it: a header
(`schemaVersion`, `deviceProperties`, `distributedInfo`, `baseTimeNanoseconds`)
and a `traceEvents` array whose GPU kernels are complete events
(`"ph": "X", "cat": "kernel"`) with `ts`/`dur` in microseconds, `pid` the
device and `tid` the stream. Only kernel intervals are kept, in compact arrays,
so a trace of hundreds of MB is read in bounded memory.
"""

from __future__ import annotations

import logging
import math
import os
import re
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bubblewatch.errors import InputError
from bubblewatch.limits import (
    KINETO_MAX_DEVICES,
    KINETO_MAX_FILE_BYTES,
    KINETO_MAX_RANK,
    LimitError,
)
from bubblewatch.sources.kineto._jsonstream import JsonObjectStream, StreamError
from bubblewatch.sources.kineto.intervals import FloatArray

log = logging.getLogger(__name__)

# Collective and point-to-point communication kernels: NCCL/RCCL, and the custom
# all-reduce kernels SGLang and vLLM use for small TP reductions.
DEFAULT_COMM_PATTERN = (
    r"nccl|rccl|cross_device_reduce|custom_?all_?reduce|all_?reduce|all_?gather"
    r"|reduce_?scatter|sendrecv|all_?to_?all"
)
# Point-to-point transfers: what pipeline stages hand activations over with.
DEFAULT_P2P_PATTERN = r"sendrecv|\bsend|\brecv|_send|_recv"
_KERNEL_CATS = frozenset({"kernel", "Kernel"})
_COPY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
_LAUNCH_NAMES = {
    "cudaLaunchKernel": "kernel",
    "cudaLaunchKernelExC": "kernel",
    "cuLaunchKernel": "kernel",
    "cuLaunchKernelEx": "kernel",
    "cudaGraphLaunch": "graph",
    "cuGraphLaunch": "graph",
}
_NUMBER = (int, float)
_FILENAME_TP = re.compile(r"-TP-(\d+)")
_FILENAME_PP = re.compile(r"-PP-(\d+)")
_FILENAME_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class _DeviceKernels:
    """Growing interval arrays for one device (array('d') keeps 8 bytes a number)."""

    compute_start: array[float] = field(default_factory=lambda: array("d"))
    compute_end: array[float] = field(default_factory=lambda: array("d"))
    comm_start: array[float] = field(default_factory=lambda: array("d"))
    comm_end: array[float] = field(default_factory=lambda: array("d"))
    p2p_start: array[float] = field(default_factory=lambda: array("d"))
    streams: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class DeviceTimeline:
    """Kernel intervals of one GPU in one file, in µs on the file's clock (not yet merged)."""

    device: int
    compute_start_us: FloatArray
    compute_end_us: FloatArray
    comm_start_us: FloatArray
    comm_end_us: FloatArray
    p2p_start_us: FloatArray
    n_streams: int


@dataclass(frozen=True)
class RankTrace:
    """What one trace file says: its devices' kernels, its rank and clock, and counts."""

    path: str
    devices: Mapping[int, DeviceTimeline]
    base_time_ns: int
    window_us: tuple[float, float] | None
    distributed: Mapping[str, Any]
    device_names: Mapping[int, str]
    filename_tp_rank: int | None
    filename_pp_rank: int | None
    filename_rank: int | None
    copy_us: float
    launches: Mapping[str, int]
    n_events: int
    truncated: bool
    # `ProfilerStep#N` annotations (torch.profiler's step markers): (N, start µs, end µs).
    profiler_steps: tuple[tuple[int, float, float], ...] = ()

    @property
    def rank(self) -> int | None:
        r = self.distributed.get("rank")
        return r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else None

    @property
    def world_size(self) -> int | None:
        w = self.distributed.get("world_size")
        return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def read_rank_trace(
    path: str | os.PathLike[str], *, comm_pattern: str = DEFAULT_COMM_PATTERN
) -> RankTrace:
    """Stream one trace file; raise InputError naming the file, line and field on bad input."""
    p = str(path)
    if not Path(p).is_file():
        raise InputError("no such file", path=p)
    if os.stat(p).st_size > KINETO_MAX_FILE_BYTES:
        raise LimitError(f"file is larger than {KINETO_MAX_FILE_BYTES} bytes", path=p)
    comm = re.compile(comm_pattern, re.IGNORECASE)
    stream = JsonObjectStream(p, frozenset({"traceEvents"}), max_bytes=KINETO_MAX_FILE_BYTES)
    devices: dict[int, _DeviceKernels] = {}
    p2p = re.compile(DEFAULT_P2P_PATTERN, re.IGNORECASE)
    is_comm: dict[str, int] = {}  # 0 compute, 1 collective, 2 point-to-point
    lo, hi = math.inf, -math.inf
    copy_us = 0.0
    launches = {"kernel": 0, "graph": 0}
    steps: list[tuple[int, float, float]] = []
    n = 0
    try:
        for _, ev in stream:
            n += 1
            if not isinstance(ev, dict):
                raise InputError(
                    f"traceEvents[{n - 1}] must be an object, got {type(ev).__name__}",
                    path=p,
                    line=stream.value_line(),
                    field="traceEvents",
                )
            if ev.get("ph") != "X":
                continue
            ts, dur = _interval(ev, p, stream, n)
            lo, hi = min(lo, ts), max(hi, ts + dur)
            cat = ev.get("cat")
            if cat in _KERNEL_CATS:
                name = ev.get("name")
                if not isinstance(name, str):
                    raise InputError(
                        f"traceEvents[{n - 1}]: a kernel needs a string 'name', got {name!r}",
                        path=p,
                        line=stream.value_line(),
                        field="name",
                    )
                flag = is_comm.get(name)
                if flag is None:
                    flag = is_comm[name] = (
                        0 if comm.search(name) is None else 2 if p2p.search(name) else 1
                    )
                dev, stream_id = _device_stream(ev, p, stream, n)
                k = devices.get(dev)
                if k is None:
                    if len(devices) >= KINETO_MAX_DEVICES:
                        raise LimitError(
                            f"kernels on more than {KINETO_MAX_DEVICES} devices in one file",
                            path=p,
                            line=stream.value_line(),
                        )
                    k = devices[dev] = _DeviceKernels()
                k.streams.add(stream_id)
                if flag:
                    k.comm_start.append(ts)
                    k.comm_end.append(ts + dur)
                    if flag == 2:
                        k.p2p_start.append(ts)
                else:
                    k.compute_start.append(ts)
                    k.compute_end.append(ts + dur)
            elif cat == "user_annotation":
                step = _profiler_step(ev.get("name"))
                if step is not None:
                    steps.append((step, ts, ts + dur))
            elif cat in _COPY_CATS:
                copy_us += dur
            elif cat in {"cuda_runtime", "cuda_driver"}:
                kind = _LAUNCH_NAMES.get(str(ev.get("name")))
                if kind is not None:
                    launches[kind] += 1
    except StreamError as e:
        raise InputError(f"not a readable trace: {e}", path=p, line=e.line) from e
    header = stream.header
    if "traceEvents" not in stream.seen and not stream.truncated:
        _require_trace_events(stream, p)
    if stream.truncated:
        log.warning(
            "%s: the file ends early (truncated); using the %d complete events before the cut",
            p,
            n,
        )
    return RankTrace(
        path=p,
        devices={d: _freeze(d, k) for d, k in sorted(devices.items())},
        base_time_ns=_base_time_ns(header, p),
        window_us=None if n == 0 or not math.isfinite(lo) else (lo, hi),
        distributed=_distributed(header, p),
        device_names=_device_names(header),
        filename_tp_rank=_match_int(_FILENAME_TP, p),
        filename_pp_rank=_match_int(_FILENAME_PP, p),
        filename_rank=_match_int(_FILENAME_RANK, p),
        copy_us=copy_us,
        launches=launches,
        n_events=n,
        truncated=stream.truncated,
        profiler_steps=tuple(sorted(steps)),
    )


def _require_trace_events(stream: JsonObjectStream, path: str) -> None:
    keys = ", ".join(sorted(stream.header)[:8]) or "none"
    raise InputError(
        f"not a PyTorch profiler trace: no 'traceEvents' array (top-level keys: {keys})",
        path=path,
        field="traceEvents",
    )


def _interval(
    ev: dict[str, Any], path: str, stream: JsonObjectStream, n: int
) -> tuple[float, float]:
    ts: Any = ev.get("ts")
    dur: Any = ev.get("dur", 0)
    if type(ts) in _NUMBER and type(dur) in _NUMBER and math.isfinite(ts) and 0 <= dur < math.inf:
        return float(ts), float(dur)
    for key, v in (("ts", ts), ("dur", dur)):
        if type(v) not in _NUMBER or not math.isfinite(v):
            raise InputError(
                f"traceEvents[{n - 1}] ({ev.get('name')!r}): must be a finite number of "
                f"microseconds, got {v!r}",
                path=path,
                line=stream.value_line(),
                field=key,
            )
    raise InputError(
        f"traceEvents[{n - 1}] ({ev.get('name')!r}): duration must be >= 0, got {dur!r}",
        path=path,
        line=stream.value_line(),
        field="dur",
    )


def _device_stream(
    ev: dict[str, Any], path: str, stream: JsonObjectStream, n: int
) -> tuple[int, int]:
    args = ev.get("args")
    args = args if isinstance(args, dict) else {}
    dev = args.get("device", ev.get("pid"))
    sid = args.get("stream", ev.get("tid", 0))
    if isinstance(dev, str) and dev.isascii() and dev.isdigit() and len(dev) <= 30:
        dev = int(dev)
    if not isinstance(dev, int) or isinstance(dev, bool) or dev < 0:
        raise InputError(
            f"traceEvents[{n - 1}] ({ev.get('name')!r}): a kernel needs a device index "
            f"in args.device or pid, got {dev!r}",
            path=path,
            line=stream.value_line(),
            field="args.device",
        )
    if dev > KINETO_MAX_RANK:
        raise LimitError(
            f"traceEvents[{n - 1}] ({ev.get('name')!r}): device index {dev} is above "
            f"{KINETO_MAX_RANK}",
            path=path,
            line=stream.value_line(),
            field="args.device",
        )
    return dev, sid if isinstance(sid, int) and not isinstance(sid, bool) else 0


def _freeze(device: int, k: _DeviceKernels) -> DeviceTimeline:
    return DeviceTimeline(
        device=device,
        compute_start_us=np.frombuffer(k.compute_start, dtype=np.float64).copy(),
        compute_end_us=np.frombuffer(k.compute_end, dtype=np.float64).copy(),
        comm_start_us=np.frombuffer(k.comm_start, dtype=np.float64).copy(),
        comm_end_us=np.frombuffer(k.comm_end, dtype=np.float64).copy(),
        p2p_start_us=np.sort(np.frombuffer(k.p2p_start, dtype=np.float64)),
        n_streams=len(k.streams),
    )


def _base_time_ns(header: Mapping[str, Any], path: str) -> int:
    v = header.get("baseTimeNanoseconds", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InputError(
            f"must be a non-negative integer, got {v!r}", path=path, field="baseTimeNanoseconds"
        )
    return v


def _distributed(header: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    v = header.get("distributedInfo", {})
    if not isinstance(v, dict):
        raise InputError(f"must be an object, got {v!r}", path=path, field="distributedInfo")
    for key in ("rank", "world_size"):
        x = v.get(key)
        if x is not None and (not isinstance(x, int) or isinstance(x, bool) or x < 0):
            raise InputError(
                f"must be a non-negative integer, got {x!r}",
                path=path,
                field=f"distributedInfo.{key}",
            )
    return v


def _device_names(header: Mapping[str, Any]) -> dict[int, str]:
    props = header.get("deviceProperties", [])
    out: dict[int, str] = {}
    if isinstance(props, list):
        for d in props:
            if isinstance(d, dict) and isinstance(d.get("id"), int):
                out[d["id"]] = str(d.get("name", ""))
    return out


def _profiler_step(name: object) -> int | None:
    """N of a `ProfilerStep#N` annotation, else None."""
    if not isinstance(name, str) or not name.startswith("ProfilerStep#"):
        return None
    tail = name[len("ProfilerStep#") :]
    # ASCII digits of a sane length: "ProfilerStep#²" or 5000 digits made int() raise.
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) <= 18 else None


def _match_int(pattern: re.Pattern[str], path: str) -> int | None:
    m = pattern.search(Path(path).name)
    return int(m.group(1)) if m else None
