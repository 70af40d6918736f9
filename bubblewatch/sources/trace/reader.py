"""Read a trace file back, a block of lines at a time, tolerating a tail cut short while writing.

`TraceReader` reads the file in blocks of whole lines (plain or gzip,
bubblewatch.sources.blocks) and checks the header first. `read()` assembles a
Recording and `pieces()` yields it in parts of a bounded number of samples:
each block's sample and load records go to columns at once
(bubblewatch.sources.trace.fast), and a block the fast path does not vouch
for is read again record by record (`records`), which names the file,
line and field of the first bad record. Iterating the reader yields every
record that way. A last line without its newline, or a gzip stream that ends
early, marks the result `truncated` instead of failing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from bubblewatch.limits import BOUNDED_JSON, JSON_MAX_DEPTH, LimitError, json_depth_exceeds
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.model.samples import Event, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.blocks import Cut, LineBlock, LineBlocks, decode_line
from bubblewatch.sources.trace.fast import FastBlock, parse_block
from bubblewatch.sources.trace.format import TraceError
from bubblewatch.sources.trace.records import (
    parse_event,
    parse_header,
    parse_load,
    parse_sample,
    parse_topology,
    record_time,
)

# Samples per piece of `pieces()` (about 10 MB of columns for a dozen metrics).
PIECE_SAMPLES = 50_000


class TraceReader:
    """Reads a trace file; `truncated` tells if the tail was cut."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.truncated = False
        self.cut: Cut | None = None  # where a truncated file stops
        self.header: dict[str, Any] = {}
        self.gpus: list[GpuInfo] = []
        self.topology: Topology | None = None
        self._summary: dict[str, Any] = {}
        self._topology_now: Topology | None = None
        self._lines = 0
        self._stopped = False
        self._blocks: LineBlocks | None = None

    def _start(self) -> LineBlocks:
        self.truncated = False
        self.cut = None
        self.header = {}
        self.gpus = []
        self.topology = None
        self._topology_now = None
        self._summary = {}
        self._lines = 0
        self._stopped = False
        self._blocks = LineBlocks(self.path, error=TraceError)
        return self._blocks

    def _each(self, blocks: LineBlocks) -> Iterator[LineBlock]:
        """The blocks, until a damaged line ends what can be read."""
        for block in blocks:
            yield block
            if self._stopped:
                return

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yields (line number, record) for every complete line after the header."""
        blocks = self._start()
        for block in self._each(blocks):
            yield from self._records(block, range(len(block.lines)))
        self._finish(blocks)

    def read(self) -> Recording:
        """The whole trace as a Recording."""
        b = RecordingBuilder()
        blocks = self._start()
        for block in self._each(blocks):
            self._fill(b, block)
        self._finish(blocks)
        return self._built(b)

    def pieces(self, samples: int = PIECE_SAMPLES) -> Iterator[Recording]:
        """The trace in Recordings of about `samples` samples each, in file order.

        Each piece carries the GPUs, topology and meta known when it ends; the
        last one the whole file's meta (summary records come last).
        """
        b = RecordingBuilder()
        blocks = self._start()
        for block in self._each(blocks):
            self._fill(b, block)
            if b.n_samples >= samples:
                yield self._built(b)
                b = RecordingBuilder()
        self._finish(blocks)
        yield self._built(b)

    def _finish(self, blocks: LineBlocks) -> None:
        self.truncated = self.truncated or blocks.truncated
        if self.truncated and self.cut is None:
            self.cut = blocks.cut_here()
        if self.header:
            return
        if self.truncated:
            raise TraceError(
                "file ends inside the header line (cut short while writing)",
                path=self.path,
                line=max(self._lines, 1),
            )
        raise TraceError(
            "empty file: no header line" if self._lines == 0 else "no header line",
            path=self.path,
            line=1,
        )

    def _built(self, b: RecordingBuilder) -> Recording:
        for g in self.gpus:
            b.add_gpu(g)
        b.topology = self._topology_now
        b.meta.update(self.header.get("meta", {}))
        b.meta.update(self._summary)
        if self.truncated:
            b.meta["truncated"] = True
            if self.cut is not None:
                b.meta["truncation"] = self.cut.to_dict()
        return b.build()

    # -- one block ----------------------------------------------------------------

    def _fill(self, b: RecordingBuilder, block: LineBlock) -> None:
        """Add a block's records to `b`: the fast path where it can, else record by record."""
        lines = block.lines
        first = 0
        if not self.header:
            for lineno, rec in self._records(block, range(len(lines)), stop_at_header=True):
                self._apply(b, rec, lineno)
            first = self._lines - block.first_line + 1
            if not self.header:
                return
        rest = range(first, len(lines))
        if not block.last_ended or not rest:
            for lineno, rec in self._records(block, rest):
                self._apply(b, rec, lineno)
            return
        if first == 0 and all(lines):
            keep, text, data = None, lines, block.data
        else:
            keep = [k for k in rest if lines[k].strip()]
            text = [lines[k] for k in keep]
            data = b"\n".join(text)
        fast = parse_block(text, data) if text else FastBlock()
        if fast is None:
            for lineno, rec in self._records(block, rest):
                self._apply(b, rec, lineno)
            return
        for g, (t, values) in fast.samples.items():
            b.add_columns(g, t, values)
        if fast.load is not None:
            b.add_load_columns(*fast.load)
        others = fast.others if keep is None else [keep[i] for i in fast.others]
        for lineno, rec in self._records(block, others):
            self._apply(b, rec, lineno)
        self._lines = block.end_line - 1

    def _records(
        self, block: LineBlock, indices: range | list[int], *, stop_at_header: bool = False
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """The record path: each line decoded, checked and parsed, naming it on error."""
        for k in indices:
            lineno = block.first_line + k
            self._lines = lineno
            try:
                raw = decode_line(block.lines[k], self.path, lineno, TraceError)
            except TraceError:
                if self._damaged(block, k, "not UTF-8"):
                    return
                raise
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
                if not block.last_ended:
                    self.truncated = True
                    if not self.header:
                        raise TraceError(
                            "file ends inside the header line (cut short while writing)",
                            path=self.path,
                            line=lineno,
                        ) from e
                    return
                if self.header and self._damaged(block, k, f"not valid JSON ({e.msg})"):
                    return
                raise TraceError(f"not valid JSON ({e.msg})", path=self.path, line=lineno) from e
            except ValueError as e:  # an integer past MAX_INT_DIGITS
                raise LimitError(str(e), path=self.path, line=lineno) from None
            if not isinstance(rec, dict):
                raise TraceError("a record must be a JSON object", path=self.path, line=lineno)
            if not self.header:
                self.gpus, self.topology = parse_header(rec, self.path, lineno)
                self._topology_now = self.topology
                self.header = rec
                if stop_at_header:
                    return
                continue
            yield lineno, rec

    def _damaged(self, block: LineBlock, k: int, what: str) -> bool:
        """Whether the bad line `k` of `block` belongs to a stream damaged from there on.

        If so, the file is read up to it (`truncated`, `cut` says where and why) and
        every later line is skipped; otherwise the line is a bad record.
        """
        lineno = block.first_line + k
        after = self._blocks.damage_after(lineno) if self._blocks is not None else None
        if after is None or not self.header:
            return False
        self.truncated = True
        self._stopped = True
        self.cut = Cut(lineno, block.byte_of(k), f"{what}, and past it {after.reason}")
        return True

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
            self._topology_now = parse_topology(rec.get("topology"), self.path, lineno)
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


def read_trace(path: str | os.PathLike[str]) -> Recording:
    """Read a whole trace file into a Recording."""
    return TraceReader(path).read()
