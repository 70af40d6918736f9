"""Cells of up to 8 bytes read as one 64-bit word each: digits, point and unit at once.

The quickest form of the nvidia-smi fast path (_smi_fast): a column whose
cells nvidia-smi printed the usual way (one blank after the comma, at most 8
digits with the point at one place, the unit after a blank, or bitmasks of
16 hex digits) is read with a few integer operations on one word per cell
(the cell's last 8 bytes, gathered from a stride-1 view of the block), not a
byte matrix per column. A cell's bytes are then its word's upper bytes and
the bytes before it are masked off; digits are checked and combined eight at
a time (SWAR, as in simdjson's parse_eight_digits). Every function returns
None when a cell is not in that form, and the caller reads the column with
_bytecells, which accepts more and gives the same values for what these do.
"""

from __future__ import annotations

from datetime import tzinfo

import numpy as np
import numpy.typing as npt

from bubblewatch.sources.importers._fastcsv import minute_micros, stamps_s

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
ByteArray = npt.NDArray[np.uint8]

_SPACE, _ZERO, _X = 32, 48, ord("x")
_ONES = 0x0101010101010101
_ALL = (1 << 64) - 1
# KEEP[w]: the top w bytes of a word (a cell of width w, right-aligned, and nothing before it).
_KEEP = np.array([(_ALL << (8 * (8 - w))) & _ALL for w in range(9)], dtype=np.uint64)
_ZEROS = np.uint64(_ZERO * _ONES)
_POINT = (ord(".") ^ _ZERO) & 0xFF  # a point, once the digits' "0" is xor-ed out
_HIGH_BITS = np.uint64(0x80 * _ONES)
_SHIFTS = [np.uint64(8 * k) for k in range(9)]
_MINUTE_BYTES = 16  # YYYY/MM/DD HH:MM


def words(buf: ByteArray) -> WordArray:
    """Word j holds buf[j : j + 8], buf[j] in its lowest byte (a view: no copy)."""
    out: WordArray = np.ndarray((buf.size - 7,), dtype="<u8", buffer=buf, strides=(1,))
    return out


def decimals(
    buf: ByteArray, w8: WordArray, s: IntArray, e: IntArray, unit: str = ""
) -> FloatArray | None:
    """Cells `[ ]digits[.digits][ unit]` of at most 8 bytes of number, as Python's float gives them.

    One blank before the number (or none), the point at one place from the
    right in every cell (or in none), the unit after one blank in every cell
    (or in none). None for anything else.
    """
    digits = _digits(buf, w8, s, e, unit, point=True)
    if digits is None:
        return None
    mantissa, decimals = digits
    values: FloatArray = mantissa.astype(np.float64)
    # At most 8 digits: exact in float64, and one division by an exact power of ten is
    # correctly rounded, the value float() gives for the text.
    return values / 10.0**decimals if decimals else values


def whole_numbers(buf: ByteArray, w8: WordArray, s: IntArray, e: IntArray) -> IntArray | None:
    """Cells `[ ]digits` (1 to 8 digits) as int; None for anything else."""
    digits = _digits(buf, w8, s, e, "", point=False)
    return None if digits is None else digits[0].astype(np.int64)


def _digits(
    buf: ByteArray, w8: WordArray, s: IntArray, e: IntArray, unit: str, *, point: bool
) -> tuple[WordArray, int] | None:
    """The cells' digits as one integer each, and the number of digits after the point."""
    if not s.size:
        return None
    s = s + (buf[s] == _SPACE)
    word = w8[e - 8]  # the cell's last 8 bytes
    cut = 0
    if unit:
        suffix = b" " + unit.encode("ascii")
        if len(suffix) > 8:
            return None
        has = (word >> _SHIFTS[8 - len(suffix)]) == np.uint64(int.from_bytes(suffix, "little"))
        if bool(has.all()):
            cut = len(suffix)
            e = e - cut
        elif bool(has.any()):
            return None
    width = e - s
    narrowest, widest = int(width.min()), int(width.max())
    if narrowest < 1 or widest > 8:
        return None
    if cut:  # the number's last 8 bytes: in the word read if it is short enough
        word = word << _SHIFTS[cut] if widest <= 8 - cut else w8[e - 8]
    d = (word ^ _ZEROS) & _KEEP[width]  # digits 0-9, a point 0x1e, nothing before the cell
    at = _point_of(int(d[0])) if point else None
    decimals = 0
    if at is not None:
        if not bool((((d >> _SHIFTS[at]) & np.uint64(0xFF)) == np.uint64(_POINT)).all()):
            return None
        if at == 7 and narrowest < 2:
            return None  # a cell "." alone
        high = np.uint64((_ALL << (8 * (at + 1))) & _ALL)
        d = (d & high) | ((d << _SHIFTS[1]) & ~high)  # the point out, the digits before moved up
        decimals = 7 - at
    if bool(((d + np.uint64(0x76 * _ONES)) & _HIGH_BITS).any()):
        return None  # a byte that is no digit (each byte is below 0x80: the text is ASCII)
    return _combine(d, 10), decimals


def _point_of(word: int) -> int | None:
    """The byte of the first cell's word that holds the point, if any."""
    for k in range(8):
        if (word >> (8 * k)) & 0xFF == _POINT:
            return k
    return None


def _combine(d: WordArray, base: int) -> WordArray:
    """Eight digit bytes (the first in the lowest byte) as one number in `base` (10 or 16)."""
    d = ((d * np.uint64(1 + (base << 8))) >> _SHIFTS[1]) & np.uint64(0x00FF00FF00FF00FF)
    d = ((d * np.uint64(1 + ((base**2) << 16))) >> _SHIFTS[2]) & np.uint64(0x0000FFFF0000FFFF)
    out: WordArray = ((d * np.uint64(1 + ((base**4) << 32))) >> _SHIFTS[4]) & np.uint64(_ALL >> 32)
    return out


def hex_numbers(buf: ByteArray, w8: WordArray, s: IntArray, e: IntArray) -> FloatArray | None:
    """Cells `[ ]0x` + 16 hex digits (either case), below 2**53, as float; else None."""
    if not s.size:
        return None
    s = s + (buf[s] == _SPACE)
    if not bool((e - s == 18).all()):
        return None
    if bool(((buf[s] != _ZERO) | ((buf[s + 1] | np.uint8(0x20)) != _X)).any()):
        return None
    high = _hex_word(w8[s + 2])
    low = _hex_word(w8[s + 10])
    if high is None or low is None or int(high.max()) >= 1 << 21:
        return None  # 2**53 or above: the cell reader's float would round
    out: FloatArray = ((high << _SHIFTS[4]) | low).astype(np.float64)
    return out


def _hex_word(c: WordArray) -> WordArray | None:
    """Eight hex digit bytes as a number below 2**32; None if a byte is no hex digit."""
    lower = c | np.uint64(0x20 * _ONES)  # letters to lower case; digits keep their code
    digit = _at_least(lower, 0x30) & ~_at_least(lower, 0x3A)
    letter = _at_least(lower, 0x61) & ~_at_least(lower, 0x67)
    if bool(((digit | letter) != _HIGH_BITS).any()):
        return None
    # A digit's value is its low nibble; a letter's (bit 6 set) is its low nibble + 9.
    letters = (c >> np.uint64(6)) & np.uint64(_ONES)
    nibbles = (c & np.uint64(0x0F * _ONES)) + letters * np.uint64(9)
    return _combine(nibbles, 16)


def _at_least(c: WordArray, low: int) -> WordArray:
    """0x80 in each byte of `c` that is >= low (every byte below 0x80), else 0."""
    out: WordArray = (c + np.uint64((0x80 - low) * _ONES)) & _HIGH_BITS
    return out


# `:SS.mmm` after a timestamp's minute (from its byte 15, the minute's last digit), xor "0".
_STAMP_SEPARATORS = np.uint64((0xFF << 8) | (0xFF << 32))
_STAMP_SEPARATOR_CODES = np.uint64(((ord(":") ^ _ZERO) << 8) | (_POINT << 32))
_STAMP_DIGITS = np.uint64(_ALL ^ 0xFF ^ int(_STAMP_SEPARATORS))
_STAMP_WIDTH = 23  # YYYY/MM/DD HH:MM:SS.mmm, as nvidia-smi prints it


def smi_stamps(
    buf: ByteArray, w8: WordArray, s: IntArray, e: IntArray, tz: tzinfo
) -> FloatArray | None:
    """Cells `[ ]YYYY/MM/DD HH:MM:SS.mmm` as _fastcsv.smi_stamps reads them; None for any other.

    The minute part is compared as two words a row; the first row of each
    run of one minute is checked and converted (_fastcsv.minute_micros), the
    seconds and milliseconds of every row come from one more word.
    """
    if not s.size:
        return None
    s = s + (buf[s] == _SPACE)
    if not bool((e - s == _STAMP_WIDTH).all()):
        return None
    a, b = w8[s], w8[s + 8]
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.not_equal(a[1:], a[:-1], out=new[1:])
    new[1:] |= b[1:] != b[:-1]
    firsts = np.flatnonzero(new)
    window = np.lib.stride_tricks.sliding_window_view(buf, _MINUTE_BYTES)
    minutes = minute_micros(window[s[firsts]])
    if minutes is None:
        return None
    x = w8[s + 15] ^ _ZEROS
    if not bool(((x & _STAMP_SEPARATORS) == _STAMP_SEPARATOR_CODES).all()):
        return None
    if bool((((x & _STAMP_DIGITS) + np.uint64(0x76 * _ONES)) & _HIGH_BITS).any()):
        return None
    byte = [((x >> _SHIFTS[k]) & np.uint64(0xFF)).astype(np.int64) for k in (2, 3, 5, 6, 7)]
    second = byte[0] * 10 + byte[1]
    fraction = (byte[2] * 100 + byte[3] * 10 + byte[4]) * 1000
    return stamps_s(minutes, firsts, second, fraction, tz)
