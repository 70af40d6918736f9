"""Tell a profiler trace from other JSON by its first bytes, without reading the file."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from bubblewatch.sources.kineto._jsonstream import GZIP_MAGIC

_HEAD_BYTES = 64 << 10
_SUFFIXES = (".json", ".json.gz")
_KEYS = re.compile(rb'"(schemaVersion|deviceProperties|traceEvents|distributedInfo)"\s*:')


def is_kineto_trace(path: str | os.PathLike[str]) -> bool:
    """True for a directory holding trace files or a file that opens like a Chrome trace."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_SUFFIXES))
        return any(is_kineto_trace(f) for f in files[:4])
    try:
        with open(p, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC:
                with gzip.GzipFile(fileobj=f) as gz:
                    data = gz.read1(_HEAD_BYTES)
            else:
                data = f.read(_HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    start = data.lstrip()
    return start.startswith(b"{") and _KEYS.search(start) is not None
