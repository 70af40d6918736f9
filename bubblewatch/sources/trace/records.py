"""Check one trace record and turn it into a model object, or say exactly what is wrong.

Each function takes the decoded JSON object, the file and the line number, and
raises `TraceError` naming the file, line and field: the header (format
version, GPUs, topology, meta), samples (known metrics within their ranges,
see bubblewatch.model.metrics), load samples and events.
"""

from __future__ import annotations

import math
from typing import Any

from bubblewatch.limits import LIMITS_DOC, MAX_GPU_INDEX, TRACE_MAX_GPUS, LimitError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.trace.format import FORMAT_KEY, FORMAT_VERSION, TraceError

_RECORD_KEYS = {"type", "t", "gpu"}
_METRIC_KEYS = {m.value: m for m in Metric}
# Ratios may read a hair above 1 from rounding in the driver; beyond this is wrong.
_RATIO_SLACK = 1.05


def parse_header(
    rec: dict[str, Any], path: str, lineno: int
) -> tuple[list[GpuInfo], Topology | None]:
    """The GPUs and topology of a header line, after checking its version and shape."""
    version = rec.get(FORMAT_KEY)
    if version is None:
        raise TraceError(
            f"first line is not a bubblewatch trace header (no {FORMAT_KEY!r} key)",
            path=path,
            line=lineno,
            field=FORMAT_KEY,
        )
    if not _is_number(version) or version != FORMAT_VERSION:
        raise TraceError(
            f"trace format version {version!r} is not supported (this bubblewatch reads "
            f"version {FORMAT_VERSION})",
            path=path,
            line=lineno,
            field=FORMAT_KEY,
        )
    raw_gpus = rec.get("gpus", [])
    if not isinstance(raw_gpus, list):
        raise TraceError("must be a list", path=path, line=lineno, field="gpus")
    if len(raw_gpus) > TRACE_MAX_GPUS:
        raise TraceError(
            f"lists {len(raw_gpus)} GPUs; a trace holds at most {TRACE_MAX_GPUS} "
            f"(see {LIMITS_DOC})",
            path=path,
            line=lineno,
            field="gpus",
        )
    gpus: list[GpuInfo] = []
    indices: set[int] = set()
    for i, g in enumerate(raw_gpus):
        if not isinstance(g, dict):
            raise TraceError("must be an object", path=path, line=lineno, field=f"gpus[{i}]")
        try:
            info = GpuInfo.from_dict(g)
        except ValueError as e:
            raise TraceError(str(e), path=path, line=lineno, field=f"gpus[{i}]") from e
        _check_index(info.index, path, lineno, f"gpus[{i}].index")
        if info.index in indices:
            raise TraceError(
                f"GPU index {info.index} is listed twice",
                path=path,
                line=lineno,
                field=f"gpus[{i}]",
            )
        gpus.append(info)
        indices.add(info.index)
    topology = parse_topology(rec.get("topology"), path, lineno)
    meta = rec.get("meta", {})
    if not isinstance(meta, dict):
        raise TraceError("must be an object", path=path, line=lineno, field="meta")
    return gpus, topology


def parse_topology(raw: Any, path: str, lineno: int) -> Topology | None:
    """A header's or topology record's `topology` (null: not known)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TraceError("must be an object or null", path=path, line=lineno, field="topology")
    try:
        return Topology.from_dict(raw)
    except TopologyError as e:
        raise TraceError(str(e), path=path, line=lineno, field="topology") from e


def parse_load(rec: dict[str, Any], path: str, lineno: int) -> LoadSample:
    """A `load` record: running and queued requests (and an optional micro_batch), or null."""
    t = record_time(rec, path, lineno)
    return LoadSample(
        t,
        _opt_num(rec, "running", path, lineno),
        _opt_num(rec, "queued", path, lineno),
        _opt_num(rec, "micro_batch", path, lineno),
    )


def parse_event(rec: dict[str, Any], path: str, lineno: int) -> Event:
    """An `event` record: a kind, an optional GPU and an optional detail object."""
    t = record_time(rec, path, lineno)
    ev_kind = rec.get("kind")
    if not isinstance(ev_kind, str) or not ev_kind:
        raise TraceError("must be a non-empty string", path=path, line=lineno, field="kind")
    gpu = rec.get("gpu")
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
        raise TraceError(
            f"must be a non-negative integer GPU index or absent, got {gpu!r}",
            path=path,
            line=lineno,
            field="gpu",
        )
    if gpu is not None:
        _check_index(gpu, path, lineno, "gpu")
    detail = rec.get("detail", {})
    if not isinstance(detail, dict):
        raise TraceError("must be an object", path=path, line=lineno, field="detail")
    return Event(t, ev_kind, gpu, detail)


def _check_index(gpu: int, path: str, lineno: int, field: str) -> None:
    """A GPU index up to MAX_GPU_INDEX: 10**25 passed the reader and overflowed the rules."""
    if gpu > MAX_GPU_INDEX:
        raise LimitError(
            f"GPU index {gpu} is above {MAX_GPU_INDEX}", path=path, line=lineno, field=field
        )


def record_time(rec: dict[str, Any], path: str, lineno: int) -> float:
    """A record's `t`: finite seconds since the epoch."""
    t: Any = rec.get("t")
    if not _is_number(t) or not math.isfinite(t):
        raise TraceError(
            f"must be a finite number of seconds since the epoch, got {t!r}",
            path=path,
            line=lineno,
            field="t",
        )
    return float(t)


def _opt_num(rec: dict[str, Any], key: str, path: str, lineno: int) -> float | None:
    v: Any = rec.get(key)
    if v is None:
        return None
    if not _is_number(v) or not math.isfinite(v) or v < 0:
        raise TraceError(
            f"must be a non-negative number or null, got {v!r}",
            path=path,
            line=lineno,
            field=key,
        )
    return float(v)


def parse_sample(rec: dict[str, Any], path: str, lineno: int) -> Sample:
    """A `sample` record: one GPU's metrics at one time, each checked against its spec."""
    t = record_time(rec, path, lineno)
    gpu = rec.get("gpu")
    if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
        raise TraceError(
            f"must be a non-negative integer GPU index, got {gpu!r}",
            path=path,
            line=lineno,
            field="gpu",
        )
    _check_index(gpu, path, lineno, "gpu")
    values: dict[Metric, float] = {}
    for key, v in rec.items():
        if key in _RECORD_KEYS or key.startswith("x_"):
            continue
        metric = _METRIC_KEYS.get(key)
        if metric is None:
            raise TraceError(
                "unknown metric (see docs/trace-format.md; extension fields start with 'x_')",
                path=path,
                line=lineno,
                field=key,
            )
        if v is None:
            continue
        if not _is_number(v) or not math.isfinite(v):
            raise TraceError(
                f"must be a finite number or null, got {v!r}",
                path=path,
                line=lineno,
                field=key,
            )
        spec = METRICS[metric]
        if metric is Metric.CLOCKS_EVENT_REASONS and v != int(v):
            raise TraceError(
                f"must be an integer bitmask, got {v!r}", path=path, line=lineno, field=key
            )
        if spec.lower is not None and v < spec.lower:
            raise TraceError(
                f"must be >= {spec.lower:g} {spec.unit}, got {v!r}",
                path=path,
                line=lineno,
                field=key,
            )
        if spec.upper is not None and v > spec.upper * _RATIO_SLACK:
            raise TraceError(
                f"must be <= {spec.upper:g} ({spec.unit}), got {v!r}",
                path=path,
                line=lineno,
                field=key,
            )
        values[metric] = float(v)
    return Sample(t, gpu, values)


def _is_number(v: Any) -> bool:
    """An int or float, not a bool (JSON true is not 1 here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)
