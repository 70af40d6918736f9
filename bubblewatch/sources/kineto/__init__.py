"""PyTorch profiler (Kineto) traces as a telemetry source: exact kernel busy time per rank.

`load_kineto(paths)` reads one trace file per rank (or a directory of them),
streams each file, and returns a `Recording` whose `sm_active_ratio` is the
compute-kernel busy fraction per bin and `kernel_busy_ratio` the any-kernel
busy fraction, with exact totals and the stage stagger under `meta["kineto"]`.
"""

from bubblewatch.sources.kineto.build import build_recording
from bubblewatch.sources.kineto.loader import load_kineto, trace_files
from bubblewatch.sources.kineto.options import KinetoOptions
from bubblewatch.sources.kineto.reader import DEFAULT_COMM_PATTERN, RankTrace, read_rank_trace
from bubblewatch.sources.kineto.sniff import is_kineto_trace

__all__ = [
    "DEFAULT_COMM_PATTERN",
    "KinetoOptions",
    "RankTrace",
    "build_recording",
    "is_kineto_trace",
    "load_kineto",
    "read_rank_trace",
    "trace_files",
]
