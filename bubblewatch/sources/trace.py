"""The bubblewatch trace format: JSON Lines, optionally gzip-compressed.

Line 1 is a header (format version, GPUs, topology, metadata); each later line
is one record: a GPU sample, an engine-load sample, an event, a topology
change or a summary. See docs/trace-format.md. Writers flush each record, so a
file cut short by a killed process still yields every complete record.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.errors import TraceError

FORMAT_KEY = "bubblewatch_trace"
FORMAT_VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"
_RECORD_KEYS = {"type", "t", "gpu"}
_METRIC_KEYS = {m.value: m for m in Metric}
# Ratios may read a hair above 1 from rounding in the driver; beyond this is wrong.
_RATIO_SLACK = 1.05


def open_text(path: str | os.PathLike[str], mode: str = "r") -> IO[str]:
    """Open a text file, gzip-compressed if its name ends in .gz (write) or by magic (read)."""
    p = Path(path)
    if "w" in mode or "a" in mode:
        if p.suffix == ".gz":
            return cast(IO[str], gzip.open(p, mode.replace("t", "") + "t", encoding="utf-8"))
        return open(p, mode, encoding="utf-8")
    with open(p, "rb") as f:
        magic = f.read(2)
    if magic == GZIP_MAGIC:
        return cast(IO[str], gzip.open(p, "rt", encoding="utf-8"))
    return open(p, encoding="utf-8")


class TraceWriter:
    """Streams a recording to a trace file, one flushed JSON line per record."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        gpus: list[GpuInfo] | tuple[GpuInfo, ...],
        topology: Topology | None = None,
        meta: Mapping[str, Any] | None = None,
        flush_every: int = 1,
    ) -> None:
        self.path = str(path)
        self._f = open_text(path, "w")
        self._flush_every = max(1, flush_every)
        self._pending = 0
        header: dict[str, Any] = {
            FORMAT_KEY: FORMAT_VERSION,
            "gpus": [g.to_dict() for g in gpus],
            "topology": None if topology is None else topology.to_dict(),
            "meta": dict(meta or {}),
        }
        self._write(header)

    def _write(self, record: Mapping[str, Any]) -> None:
        self._f.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        self._pending += 1
        if self._pending >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        self._f.flush()
        self._pending = 0

    def sample(self, sample: Sample) -> None:
        rec: dict[str, Any] = {"type": "sample", "t": round(sample.t_s, 6), "gpu": sample.gpu}
        for m, v in sample.values.items():
            if math.isfinite(v):
                rec[m.value] = int(v) if m is Metric.CLOCKS_EVENT_REASONS else round(v, 6)
        self._write(rec)

    def load(self, load: LoadSample) -> None:
        self._write(
            {
                "type": "load",
                "t": round(load.t_s, 6),
                "running": _finite_or_none(load.running),
                "queued": _finite_or_none(load.queued),
            }
        )

    def event(self, event: Event) -> None:
        rec: dict[str, Any] = {"type": "event", "t": round(event.t_s, 6), "kind": event.kind}
        if event.gpu is not None:
            rec["gpu"] = event.gpu
        if event.detail:
            rec["detail"] = dict(event.detail)
        self._write(rec)

    def topology(self, t_s: float, topology: Topology | Mapping[str, Any] | None) -> None:
        """A topology change (None: the topology is no longer known)."""
        raw = topology.to_dict() if isinstance(topology, Topology) else topology
        self._write({"type": "topology", "t": round(t_s, 6), "topology": raw})

    def summary(self, values: Mapping[str, Any]) -> None:
        self._write({"type": "summary", **values})

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def write_trace(path: str | os.PathLike[str], recording: Recording) -> None:
    """Write a whole Recording (samples and load interleaved in time order)."""
    with TraceWriter(
        path,
        gpus=recording.gpus,
        topology=recording.topology,
        meta=recording.meta,
        flush_every=1000,
    ) as w:
        loads = list(recording.load_samples())
        li = 0
        for s in recording.samples():
            while li < len(loads) and loads[li].t_s <= s.t_s:
                w.load(loads[li])
                li += 1
            w.sample(s)
        for load in loads[li:]:
            w.load(load)
        for e in recording.events:
            if e.kind == "topology_change" and set(e.detail) == {"topology"}:
                # Written back as the topology record it was read from.
                w.topology(e.t_s, e.detail["topology"])
            else:
                w.event(e)


class TraceReader:
    """Reads a trace file record by record; `truncated` tells if the tail was cut."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.truncated = False
        self.header: dict[str, Any] = {}
        self.gpus: list[GpuInfo] = []
        self.topology: Topology | None = None
        self._summary: dict[str, Any] = {}

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yields (line number, record) for every complete line after the header."""
        self.truncated = False
        self.header = {}
        self.gpus = []
        self.topology = None
        self._summary = {}
        try:
            f = open_text(self.path)
        except OSError as e:
            raise TraceError(f"cannot open: {e.strerror or e}", path=self.path) from e
        with f:
            lineno = 0
            lines = _lines(f, self)
            for lineno, raw in lines:
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw)
                except json.JSONDecodeError as e:
                    if not raw.endswith("\n") and self._at_end(lines):
                        self.truncated = True
                        if not self.header:
                            raise TraceError(
                                "file ends inside the header line (cut short while writing)",
                                path=self.path,
                                line=lineno,
                            ) from e
                        return
                    raise TraceError(
                        f"not valid JSON ({e.msg})", path=self.path, line=lineno
                    ) from e
                if not isinstance(rec, dict):
                    raise TraceError("a record must be a JSON object", path=self.path, line=lineno)
                if not self.header:
                    self._read_header(rec, lineno)
                    continue
                yield lineno, rec
            if not self.header:
                if self.truncated:
                    raise TraceError(
                        "file ends inside the header line (cut short while writing)",
                        path=self.path,
                        line=max(lineno, 1),
                    )
                raise TraceError(
                    "empty file: no header line" if lineno == 0 else "no header line",
                    path=self.path,
                    line=1,
                )

    @staticmethod
    def _at_end(lines: Iterator[tuple[int, str]]) -> bool:
        return next(lines, None) is None

    def _read_header(self, rec: dict[str, Any], lineno: int) -> None:
        version = rec.get(FORMAT_KEY)
        if version is None:
            raise TraceError(
                f"first line is not a bubblewatch trace header (no {FORMAT_KEY!r} key)",
                path=self.path,
                line=lineno,
                field=FORMAT_KEY,
            )
        if not _is_number(version) or version != FORMAT_VERSION:
            raise TraceError(
                f"trace format version {version!r} is not supported (this bubblewatch reads "
                f"version {FORMAT_VERSION})",
                path=self.path,
                line=lineno,
                field=FORMAT_KEY,
            )
        gpus = rec.get("gpus", [])
        if not isinstance(gpus, list):
            raise TraceError("must be a list", path=self.path, line=lineno, field="gpus")
        for i, g in enumerate(gpus):
            if not isinstance(g, dict):
                raise TraceError(
                    "must be an object", path=self.path, line=lineno, field=f"gpus[{i}]"
                )
            try:
                info = GpuInfo.from_dict(g)
            except ValueError as e:
                raise TraceError(str(e), path=self.path, line=lineno, field=f"gpus[{i}]") from e
            if any(known.index == info.index for known in self.gpus):
                raise TraceError(
                    f"GPU index {info.index} is listed twice",
                    path=self.path,
                    line=lineno,
                    field=f"gpus[{i}]",
                )
            self.gpus.append(info)
        self.topology = self._topology(rec.get("topology"), lineno)
        meta = rec.get("meta", {})
        if not isinstance(meta, dict):
            raise TraceError("must be an object", path=self.path, line=lineno, field="meta")
        self.header = rec

    def _topology(self, raw: Any, lineno: int) -> Topology | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise TraceError(
                "must be an object or null", path=self.path, line=lineno, field="topology"
            )
        try:
            return Topology.from_dict(raw)
        except TopologyError as e:
            raise TraceError(str(e), path=self.path, line=lineno, field="topology") from e

    def read(self) -> Recording:
        """The whole trace as a Recording."""
        b = RecordingBuilder()
        started = False
        for lineno, rec in self:
            if not started:  # the header has been read: start from what it says
                started = True
                for g in self.gpus:
                    b.add_gpu(g)
                b.topology = self.topology
            self._apply(b, rec, lineno)
        if not started:  # a header and nothing else
            for g in self.gpus:
                b.add_gpu(g)
            b.topology = self.topology
        b.meta.update(self.header.get("meta", {}))
        b.meta.update(self._summary)
        if self.truncated:
            b.meta["truncated"] = True
        return b.build()

    def _apply(self, b: RecordingBuilder, rec: dict[str, Any], lineno: int) -> None:
        kind = rec.get("type")
        if kind == "sample":
            b.add(self.parse_sample(rec, lineno))
        elif kind == "load":
            t = self._time(rec, lineno)
            b.add_load(
                LoadSample(
                    t, self._opt_num(rec, "running", lineno), self._opt_num(rec, "queued", lineno)
                )
            )
        elif kind == "event":
            t = self._time(rec, lineno)
            ev_kind = rec.get("kind")
            if not isinstance(ev_kind, str) or not ev_kind:
                raise TraceError(
                    "must be a non-empty string", path=self.path, line=lineno, field="kind"
                )
            gpu = rec.get("gpu")
            if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
                raise TraceError(
                    f"must be a non-negative integer GPU index or absent, got {gpu!r}",
                    path=self.path,
                    line=lineno,
                    field="gpu",
                )
            detail = rec.get("detail", {})
            if not isinstance(detail, dict):
                raise TraceError("must be an object", path=self.path, line=lineno, field="detail")
            b.add_event(Event(t, ev_kind, gpu, detail))
        elif kind == "topology":
            t = self._time(rec, lineno)
            topo = self._topology(rec.get("topology"), lineno)
            b.topology = topo
            b.add_event(Event(t, "topology_change", None, {"topology": rec.get("topology")}))
        elif kind == "summary":
            self._summary = {**self._summary, **{k: v for k, v in rec.items() if k != "type"}}
        elif isinstance(kind, str) and kind.startswith("x_"):
            pass  # extension record: readers that do not know it skip it
        else:
            raise TraceError(
                f"unknown record type {kind!r} (expected sample, load, event, topology or summary)",
                path=self.path,
                line=lineno,
                field="type",
            )

    def _time(self, rec: dict[str, Any], lineno: int) -> float:
        t: Any = rec.get("t")
        if not _is_number(t) or not math.isfinite(t):
            raise TraceError(
                f"must be a finite number of seconds since the epoch, got {t!r}",
                path=self.path,
                line=lineno,
                field="t",
            )
        return float(t)

    def _opt_num(self, rec: dict[str, Any], key: str, lineno: int) -> float | None:
        v: Any = rec.get(key)
        if v is None:
            return None
        if not _is_number(v) or not math.isfinite(v) or v < 0:
            raise TraceError(
                f"must be a non-negative number or null, got {v!r}",
                path=self.path,
                line=lineno,
                field=key,
            )
        return float(v)

    def parse_sample(self, rec: dict[str, Any], lineno: int) -> Sample:
        t = self._time(rec, lineno)
        gpu = rec.get("gpu")
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            raise TraceError(
                f"must be a non-negative integer GPU index, got {gpu!r}",
                path=self.path,
                line=lineno,
                field="gpu",
            )
        values: dict[Metric, float] = {}
        for key, v in rec.items():
            if key in _RECORD_KEYS or key.startswith("x_"):
                continue
            metric = _METRIC_KEYS.get(key)
            if metric is None:
                raise TraceError(
                    "unknown metric (see docs/trace-format.md; extension fields start with 'x_')",
                    path=self.path,
                    line=lineno,
                    field=key,
                )
            if v is None:
                continue
            if not _is_number(v) or not math.isfinite(v):
                raise TraceError(
                    f"must be a finite number or null, got {v!r}",
                    path=self.path,
                    line=lineno,
                    field=key,
                )
            spec = METRICS[metric]
            if metric is Metric.CLOCKS_EVENT_REASONS and v != int(v):
                raise TraceError(
                    f"must be an integer bitmask, got {v!r}", path=self.path, line=lineno, field=key
                )
            if spec.lower is not None and v < spec.lower:
                raise TraceError(
                    f"must be >= {spec.lower:g} {spec.unit}, got {v!r}",
                    path=self.path,
                    line=lineno,
                    field=key,
                )
            if spec.upper is not None and v > spec.upper * _RATIO_SLACK:
                raise TraceError(
                    f"must be <= {spec.upper:g} ({spec.unit}), got {v!r}",
                    path=self.path,
                    line=lineno,
                    field=key,
                )
            values[metric] = float(v)
        return Sample(t, gpu, values)


def _lines(f: IO[str], reader: TraceReader) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        for lineno, raw in enumerate(f, start=1):
            yield lineno, raw
    except EOFError:
        # gzip stream cut short (writer killed): keep every complete record.
        reader.truncated = True
    except (gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as e:
        raise TraceError(f"cannot decode: {e}", path=reader.path, line=lineno + 1) from e


def _finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_trace(path: str | os.PathLike[str]) -> Recording:
    """Read a whole trace file into a Recording."""
    return TraceReader(path).read()
