"""Incremental reading of one big JSON object whose bulk is an array of small objects.

Profiler traces are a JSON object with a `traceEvents` array of millions of
small events. The standard library has no streaming parser, so this scanner
walks the top-level object key by key and decodes each array element with
`json.JSONDecoder.raw_decode` (the C scanner) from a sliding text buffer:
memory stays at one buffer plus one event, whatever the file size.

A file cut short (a profiler killed while writing, a partial copy) yields every
element that was complete and then sets `truncated`; anything else that is not
JSON raises `StreamError` with the line where it went wrong.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

from bubblewatch.errors import BubblewatchError
from bubblewatch.limits import (
    BOUNDED_JSON,
    JSON_MAX_DEPTH,
    LIMITS_DOC,
    GzipBombError,
    json_depth_exceeds,
    open_gzip_guarded,
)

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK_BYTES = 1 << 20
_WS = " \t\r\n"
# An element bigger than this is not a trace event: stop rather than eat memory.
MAX_VALUE_CHARS = 64 << 20


class StreamError(BubblewatchError, ValueError):
    """The text is not JSON of the expected shape; `line` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class _NeedMore(BubblewatchError):
    """The buffer ends inside the value being decoded."""


class JsonObjectStream:
    """Walks a top-level JSON object; arrays under `stream_keys` are yielded element by element.

    Iterating yields `(key, element)` for elements of streamed arrays; every
    other top-level member lands in `header` as it is passed. After the
    iteration `truncated` tells whether the text ended early.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        stream_keys: frozenset[str],
        *,
        max_bytes: int | None = None,
    ) -> None:
        self.path = str(path)
        self.stream_keys = stream_keys
        self.max_bytes = max_bytes  # of text (gzip undone); StreamError beyond
        self._bytes_read = 0
        self.header: dict[str, Any] = {}
        self.truncated = False
        self.seen: set[str] = set()
        self._buf = ""
        self._value_pos = 0
        self._pos = 0
        self._lines_before = 0  # newlines in text already dropped from the buffer
        self._eof = False
        self._decoder = BOUNDED_JSON
        self._raw: IO[bytes] | None = None
        self._read: Callable[[int], bytes] | None = None
        self._text = codecs.getincrementaldecoder("utf-8")()

    # -- buffer ---------------------------------------------------------------

    def _open(self) -> None:
        f = open(self.path, "rb")  # noqa: SIM115 - closed in __iter__'s finally
        magic = f.read(2)
        f.seek(0)
        if magic == GZIP_MAGIC:
            gz = open_gzip_guarded(f)  # gzip bombs refused (docs/daemon.md, Limits)
            self._raw = gz
            self._read = gz.read1
        else:
            self._raw = f
            self._read = f.read

    def _fill(self) -> bool:
        """Append the next chunk; False at the end of the text."""
        if self._eof or self._read is None:
            return False
        try:
            data = self._read(_CHUNK_BYTES)
        except EOFError:
            # gzip stream without its end marker: the writer stopped mid-file.
            self.truncated = True
            data = b""
        except (gzip.BadGzipFile, zlib.error) as e:
            raise StreamError(f"corrupt gzip data ({e})", self.line()) from e
        except GzipBombError as e:
            raise StreamError(f"{e} (see {LIMITS_DOC})", self.line()) from None
        self._bytes_read += len(data)
        if self.max_bytes is not None and self._bytes_read > self.max_bytes:
            raise StreamError(
                f"more than {self.max_bytes} bytes of JSON (gzip undone) (see {LIMITS_DOC})",
                self.line(),
            )
        try:
            text = self._text.decode(data, final=not data)
        except UnicodeDecodeError as e:
            if not data:  # a multi-byte character cut by the end of the file
                self.truncated = True
                text = ""
            else:
                raise StreamError(f"not UTF-8 text ({e.reason})", self.line()) from e
        if self._pos > len(self._buf) // 2:
            self._lines_before += self._buf.count("\n", 0, self._pos)
            self._buf = self._buf[self._pos :]
            self._pos = 0
        self._buf += text
        if not data:
            self._eof = True
            return bool(text)
        return True

    def line(self, pos: int | None = None) -> int:
        p = self._pos if pos is None else pos
        return self._lines_before + self._buf.count("\n", 0, p) + 1

    def value_line(self) -> int:
        """Line where the element just yielded starts (valid until iteration resumes)."""
        return self.line(self._value_pos)

    def _skip_ws(self) -> bool:
        """Move to the next non-blank character; False at the end of the text."""
        while True:
            buf, n, p = self._buf, len(self._buf), self._pos
            while p < n and buf[p] in _WS:
                p += 1
            self._pos = p
            if p < n:
                return True
            if not self._fill():
                return False

    def _peek(self) -> str:
        return self._buf[self._pos] if self._skip_ws() else ""

    def _expect(self, chars: str, what: str) -> str:
        c = self._peek()
        if c == "":
            raise _NeedMore
        if c not in chars:
            raise StreamError(f"expected {what}, found {c!r}", self.line())
        self._pos += 1
        return c

    def _value(self) -> Any:
        """Decode the value at the cursor, reading more text while it is incomplete."""
        if not self._skip_ws():
            raise _NeedMore
        while True:
            start = self._value_pos = self._pos
            try:
                value, end = self._decoder.raw_decode(self._buf, start)
            except json.JSONDecodeError as e:
                rel = e.pos - start  # _fill may move the text within the buffer
                if len(self._buf) - start > MAX_VALUE_CHARS:
                    raise StreamError(
                        f"a value longer than {MAX_VALUE_CHARS} characters: not a trace event "
                        f"({e.msg})",
                        self.line(start),
                    ) from e
                if self._fill():
                    continue
                at = self._pos + rel
                if e.msg.startswith("Unterminated string") or at >= len(self._buf.rstrip()):
                    raise _NeedMore from e  # the text stopped inside this value
                raise StreamError(f"not valid JSON ({e.msg})", self.line(at)) from e
            except (ValueError, RecursionError) as e:  # bounds: docs/daemon.md, Limits
                what = "nests too deeply" if isinstance(e, RecursionError) else str(e)
                raise StreamError(f"{what} (see {LIMITS_DOC})", self.line(start)) from None
            # A number may continue past the end of the buffer ("12" of "123").
            if end == len(self._buf) and not self._eof and self._fill():
                continue
            if json_depth_exceeds(self._buf[start:end]):
                raise StreamError(
                    f"nests deeper than {JSON_MAX_DEPTH} levels (see {LIMITS_DOC})",
                    self.line(start),
                )
            self._pos = end
            return value

    # -- structure ------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        self._open()
        try:
            yield from self._members()
        except _NeedMore:
            self.truncated = True
        finally:
            if self._raw is not None:
                self._raw.close()

    def _members(self) -> Iterator[tuple[str, Any]]:
        if not self._skip_ws():
            raise StreamError("empty file", 1)
        if self._peek() != "{":
            raise StreamError(f"expected a JSON object ('{{'), found {self._peek()!r}", self.line())
        self._pos += 1
        if self._peek() == "}":
            self._pos += 1
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise StreamError(f"expected a member name, found {key!r}", self.line())
            self._expect(":", "':' after a member name")
            if key in self.stream_keys:
                self.seen.add(key)
                yield from self._array(key)
            else:
                self.header[key] = self._value()
            if self._expect(",}", "',' or '}' after a member") == "}":
                return

    def _array(self, key: str) -> Iterator[tuple[str, Any]]:
        self._expect("[", f"an array under {key!r}")
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            yield key, self._value()
            if self._expect(",]", f"',' or ']' in {key!r}") == "]":
                return
