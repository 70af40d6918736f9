"""Several files of one recording read as one: the daemon's rotated traces, a directory, a glob.

`input_files(spec)` lists the files a directory or a glob pattern names
(None when `spec` is a single file, or a directory of profiler traces, which
its own reader takes whole). `read_joined(files, read)` reads each with
`read` and `join_end_to_end` lays them end to end in time order: nothing is
interpolated, so the time between two files stays a gap. The files must come
from one host and one set of GPUs, and no GPU may have a sample at the same
instant in two files (the same file given twice, or two recordings made at
once): either is refused with the two files named.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import FloatArray, GpuSeries, LoadSeries, Recording
from bubblewatch.model.samples import Event

# A pause between two files longer than this many sample intervals is listed as a gap.
GAP_INTERVALS = 3.0
# Header keys that describe one file of a rotated recording, not the whole of it.
PART_KEYS = ("part", "started_s", "truncated", "truncation")


def input_files(spec: str) -> list[str] | None:
    """The files a directory or glob pattern names, sorted by name; None for a single input."""
    p = Path(spec)
    if p.is_dir():
        from bubblewatch.sources.kineto import is_kineto_trace

        if is_kineto_trace(p):
            return None
        files = sorted(str(f) for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
        if not files:
            raise InputError(
                "is a directory without profiler traces (*.json[.gz] with traceEvents) "
                "or any other recording file",
                path=spec,
            )
        return files
    if not p.exists() and glob.has_magic(spec):
        files = sorted(f for f in glob.glob(spec) if os.path.isfile(f))
        if not files:
            raise InputError("no file matches this pattern", path=spec)
        return files
    return None


def skip_empty(files: Sequence[str]) -> tuple[list[str], list[dict[str, str]]]:
    """The files that hold something, and the empty ones (path, reason) left out.

    A full disk leaves empty files beside the good ones; one of them must not
    stop the others being read. Only when every file is empty is it an error.
    """
    kept: list[str] = []
    skipped: list[dict[str, str]] = []
    for f in files:
        try:
            empty = os.path.getsize(f) == 0
        except OSError:
            empty = False  # the reader says what is wrong with it
        if empty:
            skipped.append({"path": f, "reason": "empty file"})
        else:
            kept.append(f)
    if not kept and skipped:
        raise InputError(
            f"every file is empty ({len(skipped)} of them, e.g. {skipped[0]['path']}): "
            "nothing to read",
            path=os.path.dirname(skipped[0]["path"]) or ".",
        )
    return kept, skipped


def with_skipped(rec: Recording, skipped: list[dict[str, str]]) -> Recording:
    """`rec` with the files `skip_empty` left out listed in its meta."""
    if not skipped:
        return rec
    return replace(rec, meta={**rec.meta, "skipped_files": list(skipped)})


def read_joined(
    files: Sequence[str],
    read: Callable[[str], Recording],
    *,
    on_file: Callable[[int, int, str], None] | None = None,
) -> Recording:
    """Read every file but the empty ones with `read` and join them (see `join_end_to_end`)."""
    kept, skipped = skip_empty(files)
    parts: list[tuple[str, Recording]] = []
    for i, f in enumerate(kept):
        if on_file is not None:
            on_file(i, len(kept), f)
        parts.append((f, read(f)))
    return with_skipped(join_end_to_end(parts), skipped)


def join_end_to_end(parts: Sequence[tuple[str, Recording]]) -> Recording:
    """Recordings of one host's GPUs, each named by its file, as one Recording in time order."""
    if not parts:
        raise ValueError("nothing to join")
    if len(parts) == 1:
        return parts[0][1]
    check_same_source(parts)
    ordered = sorted(parts, key=lambda p: start_key(p[1]))
    names = [name for name, _ in ordered]
    recs = [rec for _, rec in ordered]
    series = {
        g: _join_series(g, [(i, r.series[g]) for i, r in enumerate(recs) if g in r.series], names)
        for g in sorted({g for r in recs for g in r.series})
    }
    return Recording(
        gpus=_gpus(recs),
        series=series,
        topology=recs[-1].topology,
        load=LoadSeries.concat(r.load for r in recs),
        events=_events(recs),
        meta=_meta(names, recs),
    )


def start_key(rec: Recording) -> float:
    start = rec.start_s
    if math.isfinite(start):
        return start
    started = rec.meta.get("started_s")
    return float(started) if isinstance(started, (int, float)) else math.inf


def _host(rec: Recording) -> str:
    host = rec.meta.get("host")
    if isinstance(host, str) and host:
        return host
    return ",".join(sorted({g.host for g in rec.gpus if g.host}))


def _gpu_conflict(a: Recording, b: Recording) -> str | None:
    """Why `b` cannot be the same GPUs as `a`, or None."""
    ga = {g.index: g for g in a.gpus}
    gb = {g.index: g for g in b.gpus}
    if set(ga) != set(gb):
        return f"GPU(s) {sorted(gb)} here, {sorted(ga)} there"
    for i in sorted(ga):
        for field in ("uuid", "name"):
            va, vb = getattr(ga[i], field), getattr(gb[i], field)
            if va and vb and va != vb:
                return f"GPU {i} is {vb!r} here, {va!r} there"
    return None


def check_same_source(parts: Sequence[tuple[str, Recording]]) -> None:
    first_name, first = parts[0]
    for name, rec in parts[1:]:
        ha, hb = _host(first), _host(rec)
        if ha and hb and ha != hb:
            raise InputError(
                f"recorded on host {hb!r}, but {first_name} on {ha!r}: files from different "
                "hosts are not one recording (analyse them one by one, or with `fleet`)",
                path=name,
            )
        why = _gpu_conflict(first, rec)
        if why is not None:
            raise InputError(
                f"not the same GPUs as {first_name} ({why}): files of different GPU sets "
                "are not one recording",
                path=name,
            )


def _join_series(gpu: int, pieces: list[tuple[int, GpuSeries]], names: list[str]) -> GpuSeries:
    metrics = sorted({m for _, s in pieces for m in s.values}, key=lambda m: m.value)
    t = np.concatenate([s.t_s for _, s in pieces])
    values: dict[Metric, FloatArray] = {
        m: np.concatenate(
            [s.values[m] if m in s.values else np.full(len(s), np.nan) for _, s in pieces]
        )
        for m in metrics
    }
    owner = np.repeat(np.array([i for i, _ in pieces]), [len(s) for _, s in pieces])
    if t.size > 1 and bool((np.diff(t) < 0).any()):
        # Driver-buffered rows may reach the next file with earlier times: merge by time.
        order = np.argsort(t, kind="stable")
        t, owner = t[order], owner[order]
        values = {m: v[order] for m, v in values.items()}
    same = np.flatnonzero((np.diff(t) == 0) & (np.diff(owner) != 0))
    if same.size:
        k = int(same[0])
        raise InputError(
            f"GPU {gpu} has a sample at t={t[k]:.6f} in both this file and "
            f"{names[int(owner[k])]}: the same recording given twice, or two recordings "
            "made at the same time",
            path=names[int(owner[k + 1])],
        )
    return GpuSeries(gpu, t, values)


def _gpus(recs: list[Recording]) -> tuple[GpuInfo, ...]:
    by_index: dict[int, GpuInfo] = {}
    for r in recs:
        for g in r.gpus:
            known = by_index.get(g.index)
            if known is None or (not known.uuid and g.uuid):
                by_index[g.index] = g
    return tuple(by_index[i] for i in sorted(by_index))


def _events(recs: list[Recording]) -> tuple[Event, ...]:
    out: list[Event] = []
    for prev, rec in zip([None, *recs[:-1]], recs, strict=True):
        changed = prev is not None and prev.topology != rec.topology
        own = any(e.kind == "topology_change" for e in rec.events)
        if changed and not own and math.isfinite(rec.start_s):
            # The new file's header says what the topology became while nothing was recorded.
            raw = None if rec.topology is None else rec.topology.to_dict()
            out.append(Event(rec.start_s, "topology_change", None, {"topology": raw}))
        out.extend(rec.events)
    return tuple(sorted(out, key=lambda e: e.t_s))


def _typical_interval_s(rec: Recording) -> float:
    steps = [np.diff(s.t_s) for s in rec.series.values() if len(s) > 1]
    return float(np.median(np.concatenate(steps))) if steps else math.nan


@dataclass(frozen=True)
class FileSpan:
    """One file of a joined recording: its span, samples and usual sampling interval."""

    path: str
    start_s: float
    end_s: float
    samples: int
    truncated: bool
    interval_s: float


def _meta(names: list[str], recs: list[Recording]) -> dict[str, Any]:
    spans = [
        FileSpan(
            name,
            rec.start_s,
            rec.end_s,
            rec.n_samples,
            bool(rec.meta.get("truncated", False)),
            _typical_interval_s(rec),
        )
        for name, rec in zip(names, recs, strict=True)
    ]
    return joined_meta(recs[0].meta, spans)


def joined_meta(first: Mapping[str, Any], spans: Sequence[FileSpan]) -> dict[str, Any]:
    """The first file's meta (less what describes one part), every file's span, the gaps."""
    meta: dict[str, Any] = {k: v for k, v in first.items() if k not in PART_KEYS}
    files: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    for i, f in enumerate(spans):
        files.append(
            {
                "path": f.path,
                "start_s": _finite(f.start_s),
                "end_s": _finite(f.end_s),
                "samples": f.samples,
                "truncated": f.truncated,
            }
        )
        if i == 0:
            continue
        before = spans[i - 1]
        gap_s = f.start_s - before.end_s
        step = before.interval_s
        if math.isfinite(gap_s) and math.isfinite(step) and gap_s > GAP_INTERVALS * step:
            gaps.append({"start_s": before.end_s, "end_s": f.start_s, "seconds": gap_s})
    meta["files"] = files
    meta["gaps"] = gaps
    if any(f["truncated"] for f in files):
        meta["truncated"] = True
    return meta


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


__all__ = ["input_files", "join_end_to_end", "read_joined", "skip_empty", "with_skipped"]
