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

import bubblewatch.sources.importers.nvidia_smi as smi
from bubblewatch.errors import InputError
from bubblewatch.model import Recording
from bubblewatch.sources.importers import ImportOptions, read_nvidia_smi
from bubblewatch.sources.importers import _bytecells as bc
from bubblewatch.sources.importers._smi_fast import fast_rows
from bubblewatch.sources.importers._smi_fields import first_line_columns

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
HEADER = (
    "timestamp, index, uuid, name, pci.bus_id, power.draw [W], power.draw.instant [W], "
    "power.limit [W], utilization.gpu [%], clocks.sm [MHz], temperature.gpu, memory.used [MiB], "
    "clocks_event_reasons.active\n"
)
NOHEADER_FIELDS = tuple(
    [
        "timestamp",
        "index",
        "uuid",
        "name",
        "power.draw",
        "power.draw.instant",
        "power.limit",
        "utilization.gpu",
        "clocks.sm",
        "temperature.gpu",
        "clocks_event_reasons.active",
    ]
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


def test_fast_path_takes_plain_blocks() -> None:
    """The speed is the fast path's: a block as nvidia-smi writes it is taken whole."""
    text = HEADER + "".join(_row(k, g) for k in range(100) for g in range(8))
    lines = text.splitlines()
    cols, _ = first_line_columns(
        [c.strip() for c in lines[0].split(",")], ImportOptions(), path="x", line=1
    )
    data = "\n".join(lines[1:]).encode()
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
