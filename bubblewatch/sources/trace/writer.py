"""Write a recording as a trace file: one flushed JSON line per record.

Flushing each record (or every `flush_every`) means a file cut short by a
killed process still yields every complete record. Non-finite values are never
written: a sample leaves the metric out, a load sample writes null.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.trace.column_lines import sample_and_load_lines
from bubblewatch.sources.trace.format import FORMAT_KEY, FORMAT_VERSION, open_text


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

    def lines(self, text: str, n_records: int) -> None:
        """Records already formatted as lines (by `write_trace`), `n_records` of them."""
        self._f.write(text)
        self._pending += n_records
        if self._pending >= self._flush_every:
            self.flush()

    def sample(self, sample: Sample) -> None:
        rec: dict[str, Any] = {"type": "sample", "t": round(sample.t_s, 6), "gpu": sample.gpu}
        for m, v in sample.values.items():
            if math.isfinite(v):
                rec[m.value] = int(v) if m is Metric.CLOCKS_EVENT_REASONS else round(v, 6)
        self._write(rec)

    def load(self, load: LoadSample) -> None:
        rec: dict[str, object] = {
            "type": "load",
            "t": round(load.t_s, 6),
            "running": _finite_or_none(load.running),
            "queued": _finite_or_none(load.queued),
        }
        if load.micro_batch is not None:
            rec["micro_batch"] = _finite_or_none(load.micro_batch)
        self._write(rec)

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

    def extension(self, record: Mapping[str, Any]) -> None:
        """An extension record (`type` starting `x_`), which readers skip."""
        kind = record.get("type")
        if not (isinstance(kind, str) and kind.startswith("x_")):
            raise ValueError(f"an extension record's type starts with 'x_', got {kind!r}")
        self._write(record)

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


def write_trace(
    path: str | os.PathLike[str],
    recording: Recording,
    *,
    summary: Mapping[str, Any] | None = None,
    extensions: Iterable[Mapping[str, Any]] = (),
) -> None:
    """Write a whole Recording (samples and load interleaved in time order), then `summary`.

    `extensions`: `x_` records (a simulated run's truth) written before the summary.

    The rows are formatted from the columns, a chunk at a time (`column_lines`):
    the text is what writing them record by record gives.
    """
    with TraceWriter(
        path,
        gpus=recording.gpus,
        topology=recording.topology,
        meta=recording.meta,
        flush_every=1000,
    ) as w:
        for text, n in sample_and_load_lines(recording):
            w.lines(text, n)
        for e in recording.events:
            if e.kind == "topology_change" and set(e.detail) == {"topology"}:
                # Written back as the topology record it was read from.
                w.topology(e.t_s, e.detail["topology"])
            else:
                w.event(e)
        for x in extensions:
            w.extension(x)
        if summary is not None:
            w.summary(summary)


def _finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None
