"""A block of comma-separated rows as byte offsets into one buffer, its columns parsed in numpy.

No Python object is made per cell: the block's bytes are one uint8 array,
each cell is a (start, end) pair into it, a column's cells are gathered into
a fixed-width byte matrix, and numbers are computed from their digit columns.
Every function here accepts only the plainest form of what it reads and
returns None for anything else; the importer then reads the block the exact
way, which gives the same values and names a bad cell's line and field.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from bubblewatch.sources.importers._wordcells import WordArray, words

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
ByteMatrix = npt.NDArray[np.uint8]
BoolArray = npt.NDArray[np.bool_]

_COMMA, _NEWLINE, _SPACE, _TAB = 44, 10, 32, 9
_DOT, _MINUS, _PLUS, _ZERO, _NINE = 46, 45, 43, 48, 57
# Digits a float64 holds exactly: a mantissa of at most 15 digits is below 2**53.
_MAX_DIGITS = 15
_POW10_INT = 10 ** np.arange(_MAX_DIGITS + 1, dtype=np.int64)
# Powers of ten up to 1e22 are exact in float64: mantissa / 10**F is then correctly
# rounded (one IEEE division of two exact operands), the value Python's float() gives.
_POW10_FLOAT = np.array([10.0**k for k in range(_MAX_DIGITS + 1)])
_NOT_DIGIT = 255
_MARGIN = bytes(64)  # NULs before and after a block's bytes (split_rows)
_NIBBLE_OF = np.full(256, _NOT_DIGIT, dtype=np.uint8)
for _k, _c in enumerate(b"0123456789abcdef"):
    _NIBBLE_OF[_c] = _NIBBLE_OF[bytes([_c]).upper()[0]] = _k


@dataclass(frozen=True)
class Cells:
    """The cells of n rows of k columns: each ends (exclusive) at its separator in `buf`."""

    buf: ByteMatrix  # one dimension: the block's bytes and a newline
    end: IntArray  # (n, k)
    tabs: bool  # whether the text holds a tab (else only spaces are blanks)
    words: WordArray  # words[j]: buf[j : j + 8] as one little-endian word (_wordcells)

    def column(self, i: int) -> tuple[IntArray, IntArray]:
        """Column i's cells: (start, end), each start one past the separator before it."""
        e = self.end[:, i]
        if i:
            return self.end[:, i - 1] + 1, e
        s = np.empty_like(e)
        s[0] = len(_MARGIN)
        np.add(self.end[:-1, -1], 1, out=s[1:])
        return s, e


class Scratch:
    """Byte masks kept from block to block: a fresh megabyte costs its page faults each time."""

    def __init__(self) -> None:
        self._masks = (np.empty(0, dtype=bool), np.empty(0, dtype=bool))

    def masks(self, size: int) -> tuple[BoolArray, BoolArray]:
        if self._masks[0].size < size:
            self._masks = (np.empty(size, dtype=bool), np.empty(size, dtype=bool))
        a, b = self._masks
        return a[:size], b[:size]


def split_rows(data: bytes, n: int, k: int, scratch: Scratch | None = None) -> Cells | None:
    """n lines of exactly k comma-separated cells of printable ASCII (tabs allowed); else None.

    `data` is the lines joined by newlines (no newline after the last). None
    when a line has another number of commas, or the text holds a quote, a
    control byte other than tab and newline, or a non-ASCII byte.
    """
    if not data or b'"' in data or not data.isascii() or b"\x7f" in data:
        return None
    # A last newline (strip stops there), and NULs around: a cell's bytes are then a row of
    # a sliding window over the buffer (matrix), whichever way it is aligned.
    buf = _with_margins(data)
    a, b = (scratch or Scratch()).masks(buf.size)
    controls = int(np.count_nonzero(np.less(buf, _SPACE, out=a))) - 1 - 2 * len(_MARGIN)
    tabs = controls != n - 1
    if tabs and controls != n - 1 + data.count(b"\t"):
        return None
    np.equal(buf, _COMMA, out=a)
    seps = np.flatnonzero(np.bitwise_or(a, np.equal(buf, _NEWLINE, out=b), out=a))
    if seps.size != n * k:
        return None
    end = seps.reshape(n, k)  # the margin holds no separator
    # n - 1 newlines in all: if each line's k-th separator is one, the others are commas.
    if n > 1 and bool((buf[end[:-1, -1]] != _NEWLINE).any()):
        return None
    return Cells(buf, end, tabs, words(buf))


def _with_margins(data: bytes) -> ByteMatrix:
    """`_MARGIN + data + b"\\n" + _MARGIN` as one array, the data copied once."""
    m = len(_MARGIN)
    buf = np.empty(len(data) + 1 + 2 * m, dtype=np.uint8)
    buf[:m] = 0
    buf[m : m + len(data)] = np.frombuffer(data, dtype=np.uint8)
    buf[m + len(data)] = _NEWLINE
    buf[m + len(data) + 1 :] = 0
    return buf


def stripped(cells: Cells, column: int) -> tuple[IntArray, IntArray]:
    """A column's cells without the blanks (spaces, tabs) around them: (start, end)."""
    s, e = cells.column(column)
    return strip(cells.buf, s, e.copy(), tabs=cells.tabs)


def strip(
    buf: ByteMatrix, s: IntArray, e: IntArray, *, tabs: bool = True
) -> tuple[IntArray, IntArray]:
    """(start, end) moved past leading and before trailing blanks, in place.

    `buf` ends with a byte that is no blank (split_rows' newline), so a start
    stops at the latest there; an end stops at its start.
    """
    while True:
        lead = _blank(buf[s], tabs)
        if not lead.any():
            break
        s += lead
    while True:
        trail = _blank(buf[e - 1], tabs) & (e > s)
        if not trail.any():
            break
        e -= trail
    return s, e


def _blank(c: ByteMatrix, tabs: bool) -> BoolArray:
    out: BoolArray = (c == _SPACE) | (c == _TAB) if tabs else c == _SPACE
    return out


def ends_with(buf: ByteMatrix, s: IntArray, e: IntArray, suffix: bytes) -> BoolArray:
    """Which cells end with `suffix`."""
    has = (e - s) >= len(suffix)
    for j, byte in enumerate(reversed(suffix)):
        has &= buf[e - 1 - j] == byte
    return has


def matrix(buf: ByteMatrix, s: IntArray, e: IntArray) -> ByteMatrix:
    """The cells left-aligned in an (n, widest) matrix, NUL after each cell's end."""
    width = int((e - s).max()) if s.size else 0
    out = _rows(buf, s, width)
    np.copyto(out, 0, where=np.arange(width) >= (e - s)[:, None])
    return out


def right_matrix(buf: ByteMatrix, s: IntArray, e: IntArray, pad: int = 0) -> ByteMatrix:
    """The cells right-aligned in an (n, widest) matrix, `pad` before each cell's start."""
    width = int((e - s).max()) if s.size else 0
    out = _rows(buf, e - width, width)
    np.copyto(out, pad, where=np.arange(width) < (width - (e - s))[:, None])
    return out


def _rows(buf: ByteMatrix, first: IntArray, width: int) -> ByteMatrix:
    """buf[first[i] : first[i] + width] for each i, as the rows of one matrix."""
    if width == 0:
        return np.zeros((first.size, 0), dtype=np.uint8)
    if width <= len(_MARGIN):
        # Rows of a sliding window: one index per cell, not one per byte.
        out: ByteMatrix = np.lib.stride_tricks.sliding_window_view(buf, width)[first]
        return out
    return np.take(buf, first[:, None] + np.arange(width), mode="clip")


class Texts(Sequence[str]):
    """A column's cells as str, each decoded when read (most rows' uuid and name never are)."""

    def __init__(self, buf: ByteMatrix, s: IntArray, e: IntArray) -> None:
        self._buf, self._s, self._e = buf, s, e

    def __len__(self) -> int:
        return int(self._s.shape[0])

    @overload
    def __getitem__(self, j: int) -> str: ...

    @overload
    def __getitem__(self, j: slice) -> list[str]: ...

    def __getitem__(self, j: int | slice) -> str | list[str]:
        if isinstance(j, slice):
            return list(self)[j]
        return self._buf[self._s[j] : self._e[j]].tobytes().decode("ascii")

    def __iter__(self) -> Iterator[str]:
        raw = fixed_bytes(self._buf, self._s, self._e).tolist()
        return iter([b.decode("ascii") for b in raw])


def texts(buf: ByteMatrix, s: IntArray, e: IntArray) -> Texts:
    """The cells as str (the text holds no NUL: split_rows refused control bytes)."""
    return Texts(buf, s, e)


def fixed_bytes(buf: ByteMatrix, s: IntArray, e: IntArray) -> npt.NDArray[np.bytes_]:
    """The cells as a numpy bytes array (`S<widest>`)."""
    m = matrix(buf, s, e)
    out: npt.NDArray[np.bytes_] = (
        np.ascontiguousarray(m).view(f"S{max(m.shape[1], 1)}").reshape(-1)
        if m.shape[1]
        else np.zeros(m.shape[0], dtype="S1")
    )
    return out


def hex_numbers(buf: ByteMatrix, s: IntArray, e: IntArray) -> FloatArray | None:
    """Cells `0x` + 1 to 16 hex digits, all of one width, below 2**53; None for anything else."""
    width = e - s
    if not s.size or bool((width != width[0]).any()) or not 3 <= int(width[0]) <= 18:
        return None
    m = matrix(buf, s, e)
    nibbles = _NIBBLE_OF[m[:, 2:]]
    x = m[:, 1]
    if bool((m[:, 0] != _ZERO).any() | ((x != ord("x")) & (x != ord("X"))).any()):
        return None
    if nibbles.size and int(nibbles.max()) == _NOT_DIGIT:
        return None
    # Integers below 2**53 sum exactly in float64; a larger one reads >= 2**53 and is refused.
    values: FloatArray = nibbles.astype(np.float64) @ (16.0 ** np.arange(nibbles.shape[1])[::-1])
    if values.size and float(values.max()) >= 2.0**53:
        return None
    return values


def equals(buf: ByteMatrix, s: IntArray, e: IntArray, word: bytes) -> BoolArray:
    """Which cells are exactly `word`."""
    out: BoolArray = ((e - s) == len(word)) & ends_with(buf, s, e, word)
    return out


def decimals(buf: ByteMatrix, s: IntArray, e: IntArray) -> FloatArray | None:
    """Cells of the form `[-+]?(\\d+\\.?\\d*|\\.\\d+)` with at most 15 digits, as Python's float.

    None if any cell is in another form (an exponent, more digits, a blank
    inside, an empty cell): such a block is read the exact way.
    """
    if not s.size:
        return np.zeros(0)
    fixed = _fixed_point(right_matrix(buf, s, e, _ZERO), e - s)
    return fixed if fixed is not None else _decimals(buf, s, e)


def _fixed_point(m: ByteMatrix, width: IntArray) -> FloatArray | None:
    """Unsigned decimals with the point at one place from the right in every cell (or in none).

    `m` holds the cells right-aligned, "0" before each. nvidia-smi prints
    each field with a fixed number of decimals: the digits then sit at fixed
    places of the matrix, and the mantissa is one product with the powers of
    ten. None when the cells do not line up so.
    """
    width_max = m.shape[1]
    points = np.flatnonzero(m[0] == _DOT) if m.shape[0] else np.zeros(0, dtype=np.intp)
    if points.size > 1 or width_max - points.size > _MAX_DIGITS or bool((width < 1).any()):
        return None
    digits = m - np.uint8(_ZERO)  # a non-digit wraps to above 9; the pads are "0"
    at = np.arange(width_max)
    places = width_max - 1 - at  # the power of ten of each column's digit
    scale = 1.0
    if points.size:
        p = int(points[0])
        if not bool((m[:, p] == _DOT).all()) or (p == width_max - 1 and bool((width < 2).any())):
            return None
        digits[:, p] = 0
        places[at < p] -= 1
        scale = float(_POW10_FLOAT[width_max - 1 - p])
    if digits.size and int(digits.max()) > 9:
        return None
    weights = _POW10_FLOAT[np.maximum(places, 0)]
    if points.size:
        weights[p] = 0.0
    mantissa = digits.astype(np.float64) @ weights  # integers below 2**53: exact
    values: FloatArray = mantissa / scale if scale != 1.0 else mantissa
    return values


def _decimals(buf: ByteMatrix, s: IntArray, e: IntArray) -> FloatArray | None:
    """decimals of cells in any layout (signs, points at different places)."""
    m = matrix(buf, s, e)
    inside = np.arange(m.shape[1]) < (e - s)[:, None]
    digit = (m >= _ZERO) & (m <= _NINE)
    dot = m == _DOT
    sign = np.zeros_like(digit)
    sign[:, 0] = (m[:, 0] == _MINUS) | (m[:, 0] == _PLUS)
    if bool((inside & ~(digit | dot | sign)).any()):
        return None
    count = np.count_nonzero(digit, axis=1)
    if bool(((count < 1) | (count > _MAX_DIGITS) | (np.count_nonzero(dot, axis=1) > 1)).any()):
        return None
    before = np.cumsum(digit, axis=1)  # digits up to each place
    right = count[:, None] - before  # digits after each place
    mantissa = np.where(digit, (m.astype(np.int64) - _ZERO) * _POW10_INT[right], 0).sum(axis=1)
    fraction = np.where(dot.any(axis=1), count - (before * dot).sum(axis=1), 0)
    values: FloatArray = mantissa.astype(np.float64) / _POW10_FLOAT[fraction]
    negative = sign[:, 0] & (m[:, 0] == _MINUS)
    values[negative] = -values[negative]
    return values


def whole_numbers(buf: ByteMatrix, s: IntArray, e: IntArray) -> IntArray | None:
    """Cells of ASCII digits only (1 to 15 of them), as int; None if any cell is anything else."""
    if not s.size:
        return np.zeros(0, dtype=np.int64)
    m = matrix(buf, s, e)
    inside = np.arange(m.shape[1]) < (e - s)[:, None]
    digit = (m >= _ZERO) & (m <= _NINE)
    width = e - s
    if bool((inside != digit).any() or (width < 1).any() or (width > _MAX_DIGITS).any()):
        return None
    right = width[:, None] - 1 - np.arange(m.shape[1])
    out: IntArray = np.where(digit, (m.astype(np.int64) - _ZERO) * _POW10_INT[right], 0).sum(axis=1)
    return out
