"""Helpers the importers share: reading text in blocks of lines (gzip or plain), checking values."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import replace

from bubblewatch.errors import InputError
from bubblewatch.model.metrics import METRICS, Metric
from bubblewatch.model.recording import Recording
from bubblewatch.sources.blocks import LineBlocks, decode_line, line_count

# Ratios may read a hair above 1 from rounding in the tools; beyond this is wrong.
RATIO_SLACK = 1.05
BOM = "\ufeff"
BOM_BYTES = BOM.encode("utf-8")
# A 64-bit bitmask (clock event reasons) as the tools print it: hex, or decimal.
_BITMASK = re.compile(r"0[xX][0-9a-fA-F]{1,16}|[0-9]{1,20}")


class TextBlock:
    """Lines of text (without newlines) numbered from `first_line`, in file order.

    Given as lines, or as `data`, the lines' UTF-8 joined by newlines, which
    are decoded and split only when `lines` is first read: a parser that
    converts the bytes at once (the nvidia-smi fast path) never makes them.
    """

    __slots__ = ("_count", "_lines", "data", "first_line", "last_ended", "path")

    def __init__(
        self,
        first_line: int,
        lines: list[str] | None = None,
        last_ended: bool = True,  # False: the file's last line, without a newline
        *,
        data: bytes | None = None,
        path: str = "<input>",
        count: int | None = None,  # the lines in `data`, where the caller counted them
    ) -> None:
        if lines is None and data is None:
            raise ValueError("a TextBlock needs its lines or their data")
        self.first_line = first_line
        self.last_ended = last_ended
        self.data = data
        self.path = path
        self._lines = lines
        if lines is not None:
            count = len(lines)
        elif count is None:
            count = line_count(data or b"")
        self._count = count

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            assert self.data is not None
            try:
                self._lines = self.data.decode("utf-8").split("\n")
            except UnicodeDecodeError:
                raw = self.data.split(b"\n")
                self._lines = [
                    decode_line(r, self.path, self.first_line + k) for k, r in enumerate(raw)
                ]
        return self._lines

    def __len__(self) -> int:
        """The number of lines (without decoding them)."""
        return self._count

    def after(self, start: int) -> TextBlock:
        """The block without its first `start` lines (its data kept where it has some)."""
        if self._lines is None and self.data is not None and start < self._count:
            rest = self.data.split(b"\n", start)[start]
            return TextBlock(
                self.first_line + start,
                None,
                self.last_ended,
                data=rest,
                path=self.path,
                count=self._count - start,
            )
        return TextBlock(self.first_line + start, self.lines[start:], self.last_ended)

    def numbered(self, first: int = 0) -> Iterator[tuple[int, str, bool]]:
        """(line number, text, ended) per line from index `first`, as row parsers take them."""
        lines = self.lines
        last = len(lines) - 1
        for k in range(first, len(lines)):
            yield self.first_line + k, lines[k], self.last_ended or k < last


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
            data = block.data
            if block.first_line == 1 and data.startswith(BOM_BYTES):
                data = data[len(BOM_BYTES) :]
            if data and block.last_ended:
                yield TextBlock(
                    block.first_line,
                    None,
                    block.last_ended,
                    data=data,
                    path=self.path,
                    count=block.count,
                )
                continue
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
