"""What the benchmarks share: print the result table and keep a copy of it."""

from __future__ import annotations

import sys
from pathlib import Path


def emit(lines: list[str], out: Path | None) -> None:
    """Print the table's lines; with `out`, also write them there (folders made)."""
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
