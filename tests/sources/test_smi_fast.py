"""The nvidia-smi fast path (bytes to columns in numpy) against the exact path, cell for cell.

The fast path may only accept what the exact path accepts, with the same
float64 values, and must leave every other block to it: the same file read
with the fast path switched off (monkeypatch) must give the same Recording,
and a bad cell the same error (line, field, message).
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import numpy as np
import pytest
from test_columnar_readers import _same  # tests/sources is on the pytest path
from test_importers import SMI_FIELDS as NOHEADER_FIELDS

import bubblewatch.sources.importers.nvidia_smi as smi
from bubblewatch.errors import InputError
from bubblewatch.model import Recording
from bubblewatch.sources.importers import ImportOptions, read_nvidia_smi
from bubblewatch.sources.importers import _bytecells as bc
from bubblewatch.sources.importers import _wordcells as wc
from bubblewatch.sources.importers._common import bitmask
from bubblewatch.sources.importers._fastcsv import smi_stamp_matrix
from bubblewatch.sources.importers._smi_fast import fast_rows
from bubblewatch.sources.importers._smi_fields import first_line_columns

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
HEADER = (
    "timestamp, index, uuid, name, pci.bus_id, power.draw [W], power.draw.instant [W], "
    "power.limit [W], utilization.gpu [%], clocks.sm [MHz], temperature.gpu, memory.used [MiB], "
    "clocks_event_reasons.active\n"
)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")


def _exact(path: Path, options: ImportOptions | None = None) -> Recording:
    """The file read with the fast path off: the str cells and their exact readers."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(smi._Parser, "_fast", lambda self, block: None)
        return read_nvidia_smi(path, options)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per block, whether the fast path took it."""
    taken: list[bool] = []

    def fast(*args: object) -> object:
        rows = fast_rows(*args)  # type: ignore[arg-type]
        taken.append(rows is not None)
        return rows

    monkeypatch.setattr(smi, "fast_rows", fast)
    return taken


def _row(k: int, g: int, **cells: str) -> str:
    row = {
        "ts": f"2026/03/29 01:{(k // 600) % 60:02d}:{(k // 10) % 60:02d}.{(k % 10) * 100:03d}",
        "index": str(g),
        "uuid": f"GPU-{g:04d}",
        "name": "NVIDIA H100 80GB HBM3",
        "bus": f"00000000:{g:02X}:00.0",
        "power": f"{100 + g + (k % 700) / 100:.2f} W",
        "instant": f"{95 + g + k % 13:.2f} W",
        "limit": "700.00 W",
        "util": f"{(k * 7) % 101} %",
        "clock": f"{1980 - (k % 5) * 15} MHz",
        "temp": str(40 + k % 30),
        "mem": f"{1000 + k} MiB",
        "mask": f"0x{(k % 3) * 4:016x}",
    }
    row.update(cells)
    return ", ".join(row.values()) + "\n"


# Cells the exact path reads (or marks absent) that a block's fast path must read the same,
# or leave to the exact path.
ODD_CELLS: list[dict[str, str]] = [
    {"power": "[N/A]", "instant": "[Not Supported]", "name": "[N/A]"},
    {"power": "N/A", "util": "NA", "temp": "n/a", "mask": ""},
    {"power": "", "clock": "[Unknown Error]", "limit": "[N/A]"},
    {"power": "123.4567 W", "util": "5%", "mem": "17MiB"},
    {"power": "123", "util": "5", "clock": "1980", "mem": "1024"},
    {"power": "+5.25 W", "temp": "0041", "util": "007 %"},
    {"power": ".5 W", "instant": "7. W", "util": "1.5 %"},
    {"power": "1e2 W", "clock": "1.98E3 MHz"},
    {"power": "12345678901234567.5 W"},
    {"power": "\t88.00 W\t", "temp": " 41 ", "index": " 1"},
    {"mask": "0X000000000000000C", "uuid": "  GPU-0001  "},
    {"mask": "4"},
    {"mask": "0x1"},
    {"mask": "0xffffffffffffffff"},
    {"name": "NVIDIA H100 ünïcode"},
    {"ts": "2026/03/29 01:00:00", "mem": "0 MiB"},
    {"ts": "2026/03/29 01:00:00.123456"},
    {"ts": "2026/03/29 01:00:00.12"},
    {"index": "+1"},
    {"index": "0001"},
    # Refused by the word path (_wordcells), read by the byte-matrix path or the exact one.
    {"power": "527.5 W", "instant": "7 W"},  # the point at another place, or none
    {"power": "5W", "util": "100%"},  # the unit without its blank
    {"power": "  88.00 W", "util": "5  %"},  # two blanks
    {"power": "123456789 W", "mem": "123456789 MiB"},  # more than 8 bytes of number
    {"instant": "12.345678 W", "temp": "41.", "clock": ".5 MHz"},
    {"index": "1.", "mask": "0x00000000000000004"},  # 17 hex digits
    {"mask": "0x0000000000000g04"},
    {"ts": " 2026/03/29 01:00:00.100", "uuid": "GPU-1"},  # a blank before the timestamp
    {"ts": "2026/03/29 01:00:00:100"},
    {"ts": "2026/03/29 01:00:0a.100"},
    {"ts": "2026/13/29 01:00:00.100"},
]


@pytest.mark.parametrize("odd", ODD_CELLS, ids=[",".join(c) for c in ODD_CELLS])
@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])  # Berlin: 2026-03-29 02:00 is skipped
def test_fast_path_reads_what_the_exact_path_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: dict[str, str], tz: str
) -> None:
    rows = [_row(k, g) for k in range(3000) for g in range(4)]
    for j in (7, 5000, 11999):
        k, g = divmod(j, 4)
        rows[j] = _row(k, g, **odd)
    path = tmp_path / "smi.csv"
    path.write_text(HEADER + "".join(rows))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 64 << 10)  # many blocks
    taken = _counting(monkeypatch)
    opts = ImportOptions(tz=tz)
    try:
        exact = _exact(path, opts)
    except InputError as e:
        with pytest.raises(InputError) as err:
            read_nvidia_smi(path, opts)
        assert (err.value.line, err.value.field, str(err.value)) == (e.line, e.field, str(e))
        return
    _same(read_nvidia_smi(path, opts), exact)
    assert sum(taken) >= len(taken) - 3  # only the blocks with the odd row, at most, left over


@pytest.mark.parametrize(
    "cells",
    [
        {"power": "5 W W"},
        {"power": "W 5"},
        {"power": "5 kW"},
        {"power": "-5 W"},
        {"util": "150 %"},
        {"util": "nan %"},
        {"util": "inf"},
        {"index": "-1"},
        {"index": "99999999999"},
        {"ts": "2025/02/30 00:00:00.000"},
        {"ts": "2025/02/28 24:00:00.000"},
        {"ts": "2025/02/28 00:00:00,000"},
        {"ts": "2025/02/28 00:00:61.000"},
        {"mask": "0xZZ"},
        {"mask": "0x"},
        {"temp": "4 1"},
        {"power": "1.2.3 W"},
    ],
)
def test_bad_cell_gets_the_exact_paths_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cells: dict[str, str]
) -> None:
    rows = [_row(k, g) for k in range(2000) for g in range(4)]
    rows[6000] = _row(1500, 0, **cells)
    path = tmp_path / "smi.csv"
    path.write_text(HEADER + "".join(rows))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 64 << 10)
    with pytest.raises(InputError) as exact:
        _exact(path)
    with pytest.raises(InputError) as fast:
        read_nvidia_smi(path)
    assert exact.value.line == 6002
    assert (fast.value.line, fast.value.field, str(fast.value)) == (
        exact.value.line,
        exact.value.field,
        str(exact.value),
    )


def test_layouts_of_real_captures_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No index column, CRLF line ends, a header printed again, a cut-off last line, gzip."""
    head = "timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]\r\n"
    rows = [
        f"2025/07/27 00:{k // 600:02d}:{(k // 10) % 60:02d}.{(k % 10) * 100 + g:03d}, "
        f"{g + 70 + k % 9}.{k % 100:02d} W, {k % 100} %, {130 + g} MiB\r\n"
        for k in range(3000)
        for g in range(8)
    ]
    rows.insert(12000, head)
    path = tmp_path / "smi.csv"
    path.write_text(head + "".join(rows) + "2025/07/27 00:05:00.000, 71.2", newline="")
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 64 << 10)
    taken = _counting(monkeypatch)
    fast = read_nvidia_smi(path)
    _same(fast, _exact(path))
    assert fast.meta["truncated"] is True and sum(taken) >= len(taken) - 2
    for name in sorted(p.name for p in FIX.glob("nvidia_smi_*")):
        opts = ImportOptions(fields=NOHEADER_FIELDS if "noheader" in name else None)
        _same(read_nvidia_smi(FIX / name, opts), _exact(FIX / name, opts))


def test_fast_path_takes_plain_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed is the fast path's: a block as nvidia-smi writes it is taken whole.

    Every column by the word path (_wordcells): the byte-matrix readers are not called.
    """
    text = HEADER + "".join(_row(k, g) for k in range(100) for g in range(8))
    lines = text.splitlines()
    cols, _ = first_line_columns(
        [c.strip() for c in lines[0].split(",")], ImportOptions(), path="x", line=1
    )
    data = "\n".join(lines[1:]).encode()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plain column went to the byte-matrix path")

    with monkeypatch.context() as m:
        for name in ("stripped", "decimals", "whole_numbers", "hex_numbers", "matrix"):
            m.setattr(bc, name, refuse)
        rows = fast_rows(cols, data, len(lines) - 1, smi.parse_tz("UTC"))
    assert rows is not None and rows.t_s is not None and rows.index is not None
    assert len(rows.values) == 7 and rows.limit_w is not None
    assert float(rows.t_s[9]) == 1774746000.1  # 2026/03/29 01:00:00.100 UTC
    # Text cells as the exact path keeps them (stripped where read), decoded when read.
    assert list(rows.text["name"])[:2] == [" NVIDIA H100 80GB HBM3"] * 2
    assert rows.text["uuid"][9] == " GPU-0001" and len(rows.text["uuid"]) == 800


def test_decimals_are_pythons_float_or_refused() -> None:
    """Every cell of up to 4 bytes from digits, point, signs, blank and e: float's value or None."""
    alphabet = "01.59+- e"
    cells = ["".join(p) for n in range(1, 5) for p in itertools.product(alphabet, repeat=n)]
    rng = random.Random(7)
    cells += [
        f"{rng.randrange(10 ** rng.randrange(1, 16))}.{rng.randrange(10**6):06d}"[
            : rng.randrange(1, 17)
        ]
        for _ in range(20000)
    ]
    for cell in cells:
        data = cell.encode()
        buf = np.frombuffer(data + b"\n", dtype=np.uint8)
        got = bc.decimals(buf, np.array([0]), np.array([len(data)]))
        plain = _NUMBER.fullmatch(cell) is not None and sum(c.isdigit() for c in cell) <= 15
        if got is None:
            assert not plain, cell
        else:
            assert plain, cell
            assert got[0] == float(cell) and np.signbit(got[0]) == np.signbit(float(cell)), cell
    # A column of many cells, in the layout nvidia-smi prints (fixed decimals) and mixed.
    for column in (["527.50", "84.95", "0.00", "1000.25"], ["5", "5.", ".5", "-0", "+12.125"]):
        data = ",".join(column).encode()
        buf = np.frombuffer(data + b"\n", dtype=np.uint8)
        ends = np.cumsum([len(c) for c in column]) + np.arange(len(column))
        got = bc.decimals(buf, ends - [len(c) for c in column], ends)
        assert got is not None and got.tolist() == [float(c) for c in column]


def _words(cells: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cells joined by commas in a buffer with margins, as split_rows makes it: buf, words, s, e."""
    data = ",".join(cells).encode()
    got = bc.split_rows(data, 1, len(cells))
    assert got is not None
    s = np.concatenate([got.column(0)[0], got.end[0, :-1] + 1])
    return got.buf, got.words, s, got.end[0]


def _byte_path(buf: np.ndarray, s: np.ndarray, e: np.ndarray, unit: str) -> float | None:
    """The byte-matrix path's value of one cell (as _smi_fast._numbers reads it)."""
    s, e = bc.strip(buf, s.copy(), e.copy())
    if unit and bool(bc.ends_with(buf, s, e, unit.encode())[0]):
        s, e = bc.strip(buf, s, e - len(unit))
    got = bc.decimals(buf, s, e)
    return None if got is None else float(got[0])


def test_word_cells_are_pythons_float_or_refused() -> None:
    """Every cell of up to 5 bytes from digits, point, blank and unit: float's value or None.

    The word path takes one blank before, the unit after one blank, at most 8
    bytes of digits and point; it may refuse more than the byte-matrix path,
    never accept what that path reads otherwise.
    """
    accepted = 0
    for unit in ("", "W", "%"):
        alphabet = "019. " + unit
        for n in range(1, 6):
            for p in itertools.product(alphabet, repeat=n):
                cell = "".join(p)
                buf, w8, s, e = _words([cell])
                got = wc.decimals(buf, w8, s, e, unit)
                if got is None:
                    continue
                text = cell.removeprefix(" ").removesuffix(" " + unit if unit else "")
                assert _NUMBER.fullmatch(text) and text[0] not in "+-", (cell, unit)
                assert got[0] == float(text), (cell, unit)
                assert _byte_path(buf, s, e, unit) == got[0], (cell, unit)
                accepted += 1
    assert accepted > 1000
    # The layouts nvidia-smi prints are taken: a column of fixed decimals with its unit.
    rng = random.Random(3)
    column = [f" {rng.uniform(0, 1000):.2f} W" for _ in range(3000)]
    buf, w8, s, e = _words(column)
    got = wc.decimals(buf, w8, s, e, "W")
    assert got is not None and got.tolist() == [float(c[1:-2]) for c in column]
    mixed = [*column, " 5.5 W"]
    assert wc.decimals(*_words(mixed), "W") is None  # the point at another place


def test_word_bitmasks_are_the_cell_readers_or_refused() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        v = rng.randrange(2**64) >> rng.randrange(64)
        digits = "".join(c.upper() if rng.random() < 0.3 else c for c in f"{v:016x}")
        cell = rng.choice(["", " "]) + rng.choice(["0x", "0X"]) + digits
        got = wc.hex_numbers(*_words([cell]))
        if v >= 2**53:
            assert got is None, cell
        else:
            assert got is not None and got[0] == bitmask(cell) == float(v), cell
    for bad in "g:`/@G ":
        cell = "0x00000000000000" + bad + "1"
        assert wc.hex_numbers(*_words([cell])) is None and bitmask(cell) is None, cell
    assert wc.hex_numbers(*_words(["0x0000000000000004", "0x4"])) is None  # two widths


def test_word_stamps_are_the_matrix_readers_or_refused() -> None:
    """Timestamps by words: the byte-matrix reader's values, or None; odd bytes anywhere."""
    tz = smi.parse_tz("Europe/Berlin")
    rng = random.Random(11)
    base = [
        f"2026/03/29 0{h}:{m:02d}:{sec:02d}.{ms:03d}"
        for h in (0, 1, 2, 3)
        for m in (0, 59)
        for sec in (0, 30, 59)
        for ms in (0, 5, 999)
    ]
    got = wc.smi_stamps(*_words(base), tz)
    want = smi_stamp_matrix(np.frombuffer("".join(base).encode(), np.uint8).reshape(-1, 23), tz)
    assert got is not None and want is not None and got.tolist() == want.tolist()
    for _ in range(3000):
        cells = list(base)
        j, k = rng.randrange(len(cells)), rng.randrange(23)
        cells[j] = cells[j][:k] + rng.choice("0123456789/: .a") + cells[j][k + 1 :]
        got = wc.smi_stamps(*_words(cells), tz)
        matrix = np.frombuffer("".join(cells).encode(), np.uint8).reshape(-1, 23)
        want = smi_stamp_matrix(matrix, tz)
        assert (got is None) == (want is None), cells[j]
        assert got is None or want is None or got.tolist() == want.tolist(), cells[j]
