"""The bubblewatch trace format: JSON Lines, optionally gzip-compressed.

Line 1 is a header (format version, GPUs, topology, metadata); each later line
is one record: a GPU sample, an engine-load sample, an event, a topology
change or a summary. See docs/trace-format.md. Writers flush each record, so a
file cut short by a killed process still yields every complete record.

This module is the public face of the format; the writer, the reader and the
checks of each record live in `_trace_writer`, `_trace_reader` and
`_trace_records`, what they share in `_trace_format`.
"""

from __future__ import annotations

from bubblewatch.sources._trace_format import FORMAT_KEY, FORMAT_VERSION, GZIP_MAGIC, open_text
from bubblewatch.sources._trace_reader import TraceReader, read_trace
from bubblewatch.sources._trace_writer import TraceWriter, write_trace

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
