"""Helpers the importers share: reading text lines (gzip or plain) and checking values."""

from __future__ import annotations

import gzip
import math
import os
import zlib
from collections.abc import Iterator

from bubblewatch.limits import bounded_lines
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.trace import open_text

# Ratios may read a hair above 1 from rounding in the tools; beyond this is wrong.
RATIO_SLACK = 1.05


class TextLines:
    """Iterates (line number, text without newline, whether the line was ended) over a file.

    Gzip is recognised by magic. A gzip stream cut short (the tool was killed
    mid-write) ends the iteration after the last whole line and sets
    `truncated`; a plain file's unended last line comes with `ended` False.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.truncated = False

    def __iter__(self) -> Iterator[tuple[int, str, bool]]:
        self.truncated = False
        try:
            f = open_text(self.path)
        except OSError as e:
            raise InputError(f"cannot open: {e.strerror or e}", path=self.path) from e
        lineno = 0
        with f:
            try:
                for lineno, raw in bounded_lines(f, self.path):
                    yield lineno, raw.rstrip("\r\n"), raw.endswith("\n")
            except EOFError:
                self.truncated = True
            except (gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as e:
                raise InputError(f"cannot decode: {e}", path=self.path, line=lineno + 1) from e


def check_value(metric: Metric, value: float, *, path: str, line: int, field: str) -> float:
    """`value` if finite and inside the metric's range, else an InputError naming the field."""
    spec = METRICS[metric]
    if not math.isfinite(value):
        raise InputError(
            f"must be a finite number, got {value!r}", path=path, line=line, field=field
        )
    if spec.lower is not None and value < spec.lower:
        raise InputError(
            f"must be >= {spec.lower:g} {spec.unit} as {metric.value}, got {value!r}",
            path=path,
            line=line,
            field=field,
        )
    if spec.upper is not None and value > spec.upper * RATIO_SLACK:
        raise InputError(
            f"must be <= {spec.upper:g} {spec.unit} as {metric.value}, got {value!r}",
            path=path,
            line=line,
            field=field,
        )
    return value
