"""Helpers the importers share: reading text in blocks of lines (gzip or plain), checking values."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from bubblewatch.errors import InputError
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.model.recording import Recording
from bubblewatch.sources.blocks import LineBlocks, decode_line

# Ratios may read a hair above 1 from rounding in the tools; beyond this is wrong.
RATIO_SLACK = 1.05
BOM = "\ufeff"
# A 64-bit bitmask (clock event reasons) as the tools print it: hex, or decimal.
_BITMASK = re.compile(r"0[xX][0-9a-fA-F]{1,16}|[0-9]{1,20}")


@dataclass(frozen=True)
class TextBlock:
    """Lines of text (without newlines) numbered from `first_line`, in file order."""

    first_line: int
    lines: list[str]
    last_ended: bool = True  # False: the file's last line, without a newline

    def numbered(self, first: int = 0) -> Iterator[tuple[int, str, bool]]:
        """(line number, text, ended) per line from index `first`, as row parsers take them."""
        last = len(self.lines) - 1
        for k in range(first, len(self.lines)):
            yield self.first_line + k, self.lines[k], self.last_ended or k < last


class TextLines:
    """A text file in blocks of lines (gzip by magic, bombs and over-long lines refused).

    A gzip stream cut short (the tool was killed mid-write) ends the blocks
    after the last whole line and sets `truncated`; a plain file's unended
    last line comes alone in the last block, with `last_ended` False. A UTF-8
    byte order mark (Excel's "CSV UTF-8") is taken off the first line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._blocks = LineBlocks(path)

    @property
    def truncated(self) -> bool:
        return self._blocks.truncated

    def mark_truncated(self, rec: Recording) -> Recording:
        """`rec` marked `truncated`, with where (line, byte, why), when the file was cut."""
        if not (self.truncated or rec.meta.get("truncated")):
            return rec
        cut = self._blocks.cut_here().to_dict()
        return replace(rec, meta={**rec.meta, "truncated": True, "truncation": cut})

    def __iter__(self) -> Iterator[TextBlock]:
        for block in self._blocks:
            try:
                text = block.data.decode("utf-8") if block.data else None
            except UnicodeDecodeError:
                text = None
            if text is not None:
                lines = text.split("\n")
            else:
                lines = [
                    decode_line(raw, self.path, block.first_line + k)
                    for k, raw in enumerate(block.lines)
                ]
            if block.first_line == 1 and lines and lines[0].startswith(BOM):
                lines[0] = lines[0][len(BOM) :]
            yield TextBlock(block.first_line, lines, block.last_ended)


def bitmask(cell: str) -> float | None:
    """A bitmask cell (`0x0000000000000004` or `4`) as a float; None if it is not one.

    At most 64 bits' worth of digits, matched before `int()` runs: a
    400-digit cell is not a bitmask (and would overflow a float).
    """
    text = cell.strip()
    if _BITMASK.fullmatch(text) is None:
        return None
    return float(int(text, 16) if text[:2] in ("0x", "0X") else int(text))


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
