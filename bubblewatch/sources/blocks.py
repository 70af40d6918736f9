"""A text file read in blocks of whole lines: what the columnar readers parse at once.

`LineBlocks(path)` yields `LineBlock`s of complete lines as bytes (gzip undone
by magic, gzip bombs refused, lines longer than MAX_LINE_BYTES refused before
they are held whole), each block about `block_bytes` long, with the number of
its first line. Newlines are universal, as `open()` reads text: `\\r\\n` and a
lone `\\r` end a line too. The last line of a file may lack its newline
(`LineBlock.last_ended`); a gzip stream cut short ends the blocks after the
last whole line and sets `truncated`. Lines stay bytes: a reader decodes a
block at once on its fast path, and a line at a time (naming it) when that
fails.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import IO

import numpy as np

from bubblewatch.errors import InputError
from bubblewatch.limits import MAX_LINE_BYTES, GzipBombError, LimitError, open_binary_guarded

BLOCK_BYTES = 1 << 20
_NEWLINE = 10


@dataclass(frozen=True)
class Cut:
    """Where a damaged file's intact part ends: the first line not read whole, its byte offset.

    `byte` counts the file's bytes (after gzip is undone) before that line.
    """

    line: int
    byte: int
    reason: str

    def to_dict(self) -> dict[str, int | str]:
        return {"line": self.line, "byte": self.byte, "reason": self.reason}


@dataclass(frozen=True)
class LineBlock:
    """`count` complete lines (without their newline) numbered from `first_line`.

    `data` is the lines joined by newlines; they are split into `lines` only
    when read (a columnar reader parses `data` at once).
    """

    first_line: int
    data: bytes
    count: int
    last_ended: bool = True  # False: the file's last line, without a newline
    first_byte: int = 0  # offset of the first line in the file (after gzip is undone)

    @cached_property
    def lines(self) -> list[bytes]:
        return self.data.split(b"\n")

    def byte_of(self, k: int) -> int:
        """Offset of the block's line `k` (exact for `\n` newlines)."""
        return self.first_byte + sum(len(x) + 1 for x in self.lines[:k])

    @property
    def end_line(self) -> int:
        """The number of the line after this block's last."""
        return self.first_line + self.count


class LineBlocks:
    """Iterates a file's lines in blocks; `error` is the InputError kind to raise."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        block_bytes: int | None = None,
        error: type[InputError] = InputError,
    ) -> None:
        self.path = str(path)
        self.block_bytes = block_bytes or BLOCK_BYTES
        self.error = error
        self.truncated = False
        self.cut: Cut | None = None  # set with `truncated` when the stream stops early
        self.tail: tuple[int, int] | None = None  # (line, byte) of an unended last line

    def cut_here(self, reason: str = "the last line is cut mid-record") -> Cut:
        """Where the file stops: the early end of its stream, else its unended last line."""
        if self.cut is not None:
            return self.cut
        line, byte = self.tail if self.tail is not None else (0, 0)
        return Cut(line, byte, reason)

    def __iter__(self) -> Iterator[LineBlock]:
        self.truncated = False
        self.cut = None
        self.tail = None
        try:
            f = open_binary_guarded(self.path)
        except OSError as e:
            raise self.error(f"cannot open: {e.strerror or e}", path=self.path) from e
        with f:
            yield from self._blocks(f)

    def _blocks(self, f: IO[bytes]) -> Iterator[LineBlock]:
        carry = b""
        line = 1
        consumed = 0  # bytes read (after gzip is undone)
        whole = 0  # bytes of the whole lines so far
        while True:
            raw, failure = self._read(f)
            consumed += len(raw)
            at_end = failure is not None or not raw
            buf = carry + raw
            held = b""
            if b"\r" in buf:
                buf, held = _universal_newlines(buf, at_end)
            body, sep, carry = buf.rpartition(b"\n")
            carry += held
            if sep:
                first = body.find(b"\n")
                if (first if first >= 0 else len(body)) >= MAX_LINE_BYTES:
                    raise self._too_long(line)  # the only line that can hold a carry
                count = line_count(body)
                yield LineBlock(line, body, count, first_byte=whole)
                line += count
            # The carry holds no newline, so it is the stream's own bytes, unconverted.
            whole = consumed - len(carry)
            if failure is not None:
                if isinstance(failure, EOFError):
                    # gzip stream cut short (writer killed): keep every complete line.
                    self.truncated = True
                    self.cut = Cut(line, whole, "the gzip stream ends early")
                    return
                if line > 1 and not isinstance(failure, GzipBombError):
                    # Corrupt past some whole lines: they are read, the rest cannot be.
                    self.truncated = True
                    self.cut = Cut(line, whole, f"corrupt gzip data ({failure})")
                    return
                raise self._failure(failure, line) from failure
            if at_end:
                if carry:
                    if len(carry) > MAX_LINE_BYTES:
                        raise self._too_long(line)
                    self.tail = (line, whole)
                    yield LineBlock(line, carry, 1, last_ended=False, first_byte=whole)
                return
            if len(carry) > MAX_LINE_BYTES:
                raise self._too_long(line)

    def damage_after(self, line: int) -> Cut | None:
        """How the stream fails past `line`, read again to its end (None: it does not).

        A gzip stream damaged in the middle often inflates to a few garbage lines
        before the decoder gives up: such a line is damage, not a bad record.
        """
        probe = LineBlocks(self.path, block_bytes=self.block_bytes, error=self.error)
        for _ in probe:
            pass
        return probe.cut if probe.cut is not None and probe.cut.line > line else None

    def _read(self, f: IO[bytes]) -> tuple[bytes, Exception | None]:
        """About a block of bytes, and what stopped the reading short."""
        parts: list[bytes] = []
        size = 0
        failure: Exception | None = None
        read1 = getattr(f, "read1", f.read)
        while size < self.block_bytes:
            try:
                piece = read1(self.block_bytes - size)
            except (GzipBombError, EOFError, gzip.BadGzipFile, zlib.error) as e:
                failure = e
                break
            if not piece:
                break
            parts.append(piece)
            size += len(piece)
        return b"".join(parts), failure

    def _failure(self, e: Exception, line: int) -> InputError:
        """The error for what stopped the reading, at the line it could not complete."""
        if isinstance(e, GzipBombError):
            return LimitError(str(e), path=self.path, line=line)
        return self.error(f"cannot decode: {e}", path=self.path, line=line)

    def _too_long(self, line: int) -> LimitError:
        return LimitError(f"line is longer than {MAX_LINE_BYTES} bytes", path=self.path, line=line)


def line_count(data: bytes) -> int:
    """The lines of `data` split at newlines (its newlines + 1), counted in numpy.

    A quarter of the time of `bytes.count` on a block of a megabyte.
    """
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)) + 1


def _universal_newlines(buf: bytes, at_end: bool) -> tuple[bytes, bytes]:
    """`\\r\\n` and lone `\\r` as `\\n`; a trailing `\\r` waits for the next read (a `\\n`?)."""
    held = b""
    if buf.endswith(b"\r") and not at_end:
        buf, held = buf[:-1], b"\r"
    return buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), held


def decode_line(raw: bytes, path: str, line: int, error: type[InputError] = InputError) -> str:
    """One line as text, or `error` naming it ("cannot decode")."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"cannot decode: {e}", path=path, line=line) from e
