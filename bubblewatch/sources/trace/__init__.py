"""The bubblewatch trace format: JSON Lines, optionally gzip-compressed.

Line 1 is a header (format version, GPUs, topology, metadata); each later line
is one record: a GPU sample, an engine-load sample, an event, a topology
change or a summary. See docs/trace-format.md. Writers flush each record, so a
file cut short by a killed process still yields every complete record.

This package's face holds the format's public names; the writer, the reader
and the checks of each record live in `writer`, `reader` and `records` (the
reader's vectorised path in `fast`, the writer's in `column_lines`), what they
share in `format`.
"""

from __future__ import annotations

from bubblewatch.sources.trace.format import FORMAT_KEY, FORMAT_VERSION, GZIP_MAGIC, open_text
from bubblewatch.sources.trace.reader import TraceReader, read_trace
from bubblewatch.sources.trace.writer import TraceWriter, write_trace

__all__ = [
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "GZIP_MAGIC",
    "TraceReader",
    "TraceWriter",
    "open_text",
    "read_trace",
    "write_trace",
]
