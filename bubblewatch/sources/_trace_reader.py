"""Read a trace file back, record by record, tolerating a tail cut short while writing.

`TraceReader` decodes each line (plain or gzip), checks the header first and
hands every later record to bubblewatch.sources._trace_records; `read()`
assembles a Recording. A last line without its newline, or a gzip stream
that ends early, marks the result `truncated` instead of failing.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from typing import IO, Any

from bubblewatch.limits import (
    BOUNDED_JSON,
    JSON_MAX_DEPTH,
    LimitError,
    bounded_lines,
    json_depth_exceeds,
)
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.model.samples import Event, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources._trace_format import open_text
from bubblewatch.sources._trace_records import (
    parse_event,
    parse_header,
    parse_load,
    parse_sample,
    parse_topology,
    record_time,
)
from bubblewatch.sources.errors import TraceError


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
                if json_depth_exceeds(raw):
                    raise LimitError(
                        f"record nests deeper than {JSON_MAX_DEPTH} levels",
                        path=self.path,
                        line=lineno,
                    )
                try:
                    rec = BOUNDED_JSON.decode(raw)
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
                except ValueError as e:  # an integer past MAX_INT_DIGITS
                    raise LimitError(str(e), path=self.path, line=lineno) from None
                if not isinstance(rec, dict):
                    raise TraceError("a record must be a JSON object", path=self.path, line=lineno)
                if not self.header:
                    self.gpus, self.topology = parse_header(rec, self.path, lineno)
                    self.header = rec
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
            b.add_load(parse_load(rec, self.path, lineno))
        elif kind == "event":
            b.add_event(parse_event(rec, self.path, lineno))
        elif kind == "topology":
            t = record_time(rec, self.path, lineno)
            topo = parse_topology(rec.get("topology"), self.path, lineno)
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

    def parse_sample(self, rec: dict[str, Any], lineno: int) -> Sample:
        """One `sample` record of this file as a Sample (TraceError names the line and field)."""
        return parse_sample(rec, self.path, lineno)


def _lines(f: IO[str], reader: TraceReader) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        for lineno, raw in bounded_lines(f, reader.path):
            yield lineno, raw
    except EOFError:
        # gzip stream cut short (writer killed): keep every complete record.
        reader.truncated = True
    except (gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as e:
        raise TraceError(f"cannot decode: {e}", path=reader.path, line=lineno + 1) from e


def read_trace(path: str | os.PathLike[str]) -> Recording:
    """Read a whole trace file into a Recording."""
    return TraceReader(path).read()
