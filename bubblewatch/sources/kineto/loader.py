"""Find the profiler trace files the user names and read them into a Recording.

The I/O half of the Kineto source: a directory stands for the trace files in
it; each file is streamed by bubblewatch.sources.kineto.reader, and the pure
bubblewatch.sources.kineto.build turns the parsed traces into a Recording.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from bubblewatch.errors import InputError
from bubblewatch.limits import KINETO_MAX_FILES, LimitError
from bubblewatch.model.recording import Recording
from bubblewatch.sources.kineto.build import build_recording
from bubblewatch.sources.kineto.options import KinetoOptions
from bubblewatch.sources.kineto.reader import read_rank_trace

_TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Files to read: each given file, and the trace files inside each given directory.

    In a directory, names ending in `.trace.json(.gz)` (what SGLang and
    `tensorboard_trace_handler` write) are taken; when there are none, every
    `.json`/`.json.gz` file. At most KINETO_MAX_FILES in all (one per rank),
    refused before any is read.
    """
    files: list[Path] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f for f in p.iterdir() if f.is_file() and f.name.endswith(_TRACE_SUFFIXES)
            )
            traces = [f for f in found if ".trace.json" in f.name]
            chosen = traces or found
            if not chosen:
                raise InputError(
                    "no profiler trace files (*.trace.json, *.json, *.json.gz) in this directory",
                    path=str(p),
                )
            files.extend(chosen)
        elif p.is_file():
            files.append(p)
        else:
            raise InputError("no such file or directory", path=str(p))
        if len(files) > KINETO_MAX_FILES:
            raise LimitError(
                f"{len(files)} profiler trace files so far; at most {KINETO_MAX_FILES} "
                "(one per rank)",
                path=str(p),
            )
    return files


def load_kineto(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    options: KinetoOptions | None = None,
) -> Recording:
    """Read PyTorch profiler traces (one file per rank, or a directory of them) into a Recording."""
    opts = options or KinetoOptions()
    seq = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    files = trace_files(seq)
    traces = [read_rank_trace(f, comm_pattern=opts.comm_pattern) for f in files]
    return build_recording(traces, opts)
