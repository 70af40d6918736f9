"""What every part of the trace format shares: the header key, the version, opening files.

A trace is UTF-8 text, gzip-compressed when its name ends in `.gz` (writing)
or its first bytes are the gzip magic (reading).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO, cast

from bubblewatch.errors import InputError
from bubblewatch.limits import open_text_guarded

FORMAT_KEY = "bubblewatch_trace"
FORMAT_VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"


class TraceError(InputError):
    """A trace file that does not follow docs/trace-format.md."""


def open_text(path: str | os.PathLike[str], mode: str = "r") -> IO[str]:
    """Open a text file, gzip-compressed if its name ends in .gz (write) or by magic (read)."""
    p = Path(path)
    if "w" in mode or "a" in mode:
        if p.suffix == ".gz":
            return cast(IO[str], gzip.open(p, mode.replace("t", "") + "t", encoding="utf-8"))
        return open(p, mode, encoding="utf-8")
    return open_text_guarded(p)  # gzip by magic, and gzip bombs refused
