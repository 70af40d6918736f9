"""The readers' columnar conversions (a block at a time) against reading record by record.

The trace reader's fast path may only accept what its record path accepts,
with the same values, and must leave every bad input to the record path,
which names the file, line and field. The nvidia-smi importer is one parser
that converts whole columns at once and reads a column cell by cell only
where a cell is not in the plain form: switching the whole-column
conversions off (monkeypatch) must give the same Recording. Bad records are
put deep in files of several blocks.
"""

from __future__ import annotations

import itertools
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

import bubblewatch.sources.importers.nvidia_smi as smi
import bubblewatch.sources.trace.reader as trace_reader
from bubblewatch.errors import InputError
from bubblewatch.limits import LimitError
from bubblewatch.model import Metric, Recording
from bubblewatch.sources.importers import ImportOptions, read_dcgmi, read_nvidia_smi
from bubblewatch.sources.importers import _fastcsv as fastcsv
from bubblewatch.sources.importers._fastcsv import smi_stamps
from bubblewatch.sources.importers._smi_fields import Column, Field, number
from bubblewatch.sources.importers.import_options import parse_tz
from bubblewatch.sources.stream import concat
from bubblewatch.sources.trace import TraceReader, read_trace
from bubblewatch.sources.trace.format import TraceError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
HEADER = {"bubblewatch_trace": 1, "gpus": [{"index": 0, "uuid": "GPU-0"}, {"index": 1}]}


def _same(a: Recording, b: Recording) -> None:
    assert a.gpus == b.gpus and a.topology == b.topology and a.meta == b.meta
    assert a.events == b.events
    assert set(a.series) == set(b.series)
    for g, s in a.series.items():
        np.testing.assert_array_equal(s.t_s, b.series[g].t_s)
        assert set(s.values) == set(b.series[g].values), g
        for m, v in s.values.items():
            np.testing.assert_array_equal(v, b.series[g].values[m], err_msg=f"{g} {m}")
    for x, y in zip(
        (a.load.t_s, a.load.running, a.load.queued),
        (b.load.t_s, b.load.running, b.load.queued),
        strict=True,
    ):
        np.testing.assert_array_equal(x, y)


def _record_path_trace(path: Path, monkeypatch: pytest.MonkeyPatch) -> Recording:
    with monkeypatch.context() as m:
        m.setattr(trace_reader, "parse_block", lambda lines, data: None)
        return read_trace(path)


def _sample(t: float, g: int, **values: object) -> str:
    return json.dumps({"type": "sample", "t": t, "gpu": g, **values})


def _mixed_trace(path: Path, ticks: int = 4000) -> Path:
    """Samples of two key sets, nulls, x_ fields, load, events, topology, summary, blank lines."""
    lines = [json.dumps(HEADER)]
    for k in range(ticks):
        t = 1_800_000_000 + k / 10
        lines.append(json.dumps({"type": "load", "t": t, "running": k % 7, "queued": None}))
        lines.append(_sample(t, 0, power_avg_w=100 + k % 13, sm_active_ratio=0.5, x_fan=3))
        if k % 50 == 7:
            lines.append(_sample(t, 1, power_avg_w=None, clocks_event_reasons=4))
        else:
            lines.append(_sample(t, 1, power_avg_w=200.5, clocks_event_reasons=0))
        if k == 2000:
            lines += ["", json.dumps({"type": "event", "t": t, "kind": "xid", "gpu": 1})]
            topo = {"pp_size": 2, "tp_size": 1, "stages": [[0], [1]]}
            lines.append(json.dumps({"type": "topology", "t": t, "topology": topo}))
    lines.append(_sample(1_800_000_000.05, 5, power_avg_w=1))  # a GPU the header lacks, late
    lines.append(json.dumps({"type": "summary", "samples": 2 * ticks}))
    lines.append(json.dumps({"type": "x_note", "v": [1, {"a": 2}]}))
    path.write_text("\r\n".join(lines) + "\r\n")
    return path


def test_trace_fast_path_reads_what_the_record_path_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _mixed_trace(tmp_path / "t.jsonl")
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 64 << 10)  # many blocks
    fast = read_trace(path)
    _same(fast, _record_path_trace(path, monkeypatch))
    assert fast.meta == {"samples": 8000} and fast.topology is not None
    power = fast.series[1].values[Metric.POWER_AVG_W]
    assert np.isnan(power).sum() == 80  # null: not reported at that instant
    # In pieces, laid end to end, it is the same recording.
    _same(concat(list(TraceReader(path).pieces(samples=700))), fast)


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        ({"gpu": -1}, "gpu", "non-negative integer GPU index"),
        ({"gpu": 1.0}, "gpu", "non-negative integer GPU index"),
        ({"gpu": True}, "gpu", "non-negative integer GPU index"),
        ({"sm_active_ratio": 1.5}, "sm_active_ratio", "must be <= 1"),
        ({"power_avg_w": "5"}, "power_avg_w", "finite number or null"),
        ({"clocks_event_reasons": 1.5}, "clocks_event_reasons", "integer bitmask"),
        ({"fan_pct": 3}, "fan_pct", "unknown metric"),
        ({"t": None}, "t", "finite number of seconds"),
    ],
)
def test_trace_bad_record_deep_in_a_long_file_is_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bad: dict[str, object],
    field: str,
    message: str,
) -> None:
    path = _mixed_trace(tmp_path / "t.jsonl", ticks=3000)
    lines = path.read_text().splitlines()
    rec = {"type": "sample", "t": 1_800_000_100.0, "gpu": 0, "power_avg_w": 10, **bad}
    lines.insert(5001, json.dumps(rec))
    path.write_text("\n".join(lines))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 64 << 10)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert (err.value.line, err.value.field) == (5002, field)
    assert message in str(err.value)


def test_trace_integers_past_the_bound_and_deep_extensions_stay_refused(tmp_path: Path) -> None:
    """orjson reads a 31-digit integer and 70 levels of nesting; the record path refuses both."""
    head = json.dumps(HEADER) + "\n"
    ok = "".join(_sample(1.0 + k, 0, power_avg_w=5) + "\n" for k in range(100))
    for line, error in [
        (_sample(200.0, 0, energy_j=int("9" * 31)), "more than 30 digits"),
        ('{"type":"sample","t":201,"gpu":0,"x_a":' + "[" * 70 + "]" * 70 + "}", "nests deeper"),
    ]:
        path = tmp_path / "t.jsonl"
        path.write_text(head + ok + line + "\n" + ok)
        with pytest.raises(LimitError, match=error) as err:
            read_trace(path)
        assert err.value.line == 102


def test_trace_cut_short_keeps_every_whole_record(tmp_path: Path) -> None:
    path = _mixed_trace(tmp_path / "t.jsonl", ticks=50)
    text = path.read_text()
    path.write_text(text + '{"type":"sample","t":1900000000,"gp')
    rec = read_trace(path)
    assert rec.meta["truncated"] is True and rec.n_samples == 101


# -- nvidia-smi -----------------------------------------------------------------------

SMI_HEADER = (
    "timestamp, index, uuid, name, power.draw [W], power.limit [W], utilization.gpu [%], "
    "memory.used [MiB], clocks_event_reasons.active\n"
)


def _smi_row(k: int, g: int, **cells: str) -> str:
    row = {
        "ts": f"2025/03/30 0{1 + k // 36000}:{(k // 600) % 60:02d}:{(k // 10) % 60:02d}"
        f".{(k % 10) * 100:03d}",
        "index": str(g),
        "uuid": f"GPU-{g:04d}",
        "name": "NVIDIA H100",
        "power": f"{100 + g + k % 7:.2f} W",
        "limit": "700.00 W",
        "util": f"{(k * 7) % 100} %",
        "mem": f"{1000 + k} MiB",
        "mask": f"0x{(k % 3) * 4:016x}",
    }
    row.update(cells)
    return ", ".join(row.values()) + "\n"


def _cell_by_cell_smi(path: Path, options: ImportOptions | None = None) -> Recording:
    """The file read line by line and cell by cell, through the readers that name a bad cell."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(smi._Parser, "_fast", lambda self, block: None)
        m.setattr(smi._Parser, "_plain", lambda self, lines, k: False)
        for name in ("numbers", "smi_stamps", "gpu_indices"):
            m.setattr(fastcsv, name, lambda *args, **kwargs: None)
        return read_nvidia_smi(path, options)


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])  # Berlin: the clocks go forward at 2:00
def test_smi_columns_read_what_the_cell_readers_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tz: str
) -> None:
    rows = [_smi_row(k, g) for k in range(4000) for g in range(4)]
    rows[1001] = _smi_row(250, 1, power="[N/A]", name="[Not Supported]")
    rows[5003] = _smi_row(1250, 3, mask="N/A", limit="[N/A]")
    path = tmp_path / "smi.csv"
    path.write_text(SMI_HEADER + "".join(rows))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 32 << 10)
    opts = ImportOptions(tz=tz)
    fast = read_nvidia_smi(path, opts)
    _same(fast, _cell_by_cell_smi(path, opts))
    assert fast.meta["unavailable_fields"] == {
        "power.draw": "[N/A]",
        "power.limit": "[N/A]",
        "clocks_event_reasons.active": "N/A",
    }
    for name in ("nvidia_smi_units.csv", "nvidia_smi_nounits.csv", "nvidia_smi_units.csv.gz"):
        _same(read_nvidia_smi(FIX / name), _cell_by_cell_smi(FIX / name))


def test_smi_without_index_numbers_gpus_from_the_sampling_either_way(tmp_path: Path) -> None:
    head = "timestamp, power.draw [W], utilization.gpu [%]\n"
    rows = [
        f"2025/07/27 00:{k // 600:02d}:{(k // 10) % 60:02d}.{(k % 10) * 100 + g:03d}, "
        f"{g + 1}.5 W, 5 %\n"
        for k in range(3000)
        for g in range(8)
    ]
    rows.insert(12000, head)  # the capture restarted: numbering starts again
    path = tmp_path / "smi.csv"
    path.write_text(head + "".join(rows))
    fast = read_nvidia_smi(path)
    _same(fast, _cell_by_cell_smi(path))
    assert sorted(fast.series) == list(range(8))


@pytest.mark.parametrize(
    ("cells", "field", "message"),
    [
        ({"power": "5 W W"}, "power.draw", "must be a number"),
        ({"power": "W 5"}, "power.draw", "must be a number"),
        ({"power": "5 kW"}, "power.draw", "unit 'kW'"),
        ({"util": "150 %"}, "utilization.gpu", "must be <= 1"),
        ({"util": "nan %"}, "utilization.gpu", "must be a number"),
        ({"index": "-1"}, "index", "non-negative GPU index"),
        ({"ts": "2025/02/30 00:00:00.000"}, "timestamp", "cannot read timestamp"),
        ({"mask": "0xZZ"}, "clocks_event_reasons.active", "bitmask"),
    ],
)
def test_smi_bad_cell_deep_in_a_long_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cells: dict[str, str], field: str, message: str
) -> None:
    rows = [_smi_row(k, g) for k in range(2000) for g in range(4)]
    rows[6000] = _smi_row(1500, 0, **cells)
    path = tmp_path / "smi.csv"
    path.write_text(SMI_HEADER + "".join(rows))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 32 << 10)
    with pytest.raises(InputError) as err:
        read_nvidia_smi(path)
    assert (err.value.line, err.value.field) == (6002, field)
    assert message in str(err.value)


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "+05:30", "Australia/Lord_Howe"])
def test_smi_stamps_are_read_as_strptime_reads_them(tz: str) -> None:
    rng = np.random.default_rng(1)
    start = datetime(2024, 1, 1).timestamp()
    cells = []
    for s in start + rng.uniform(0, 2 * 365 * 86400, 3000):
        d = datetime.fromtimestamp(float(s))
        cells.append(d.strftime("%Y/%m/%d %H:%M:%S.") + f"{int(rng.integers(0, 1000)):03d}")
    zone = parse_tz(tz)
    want = [
        datetime.strptime(c, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=zone).timestamp() for c in cells
    ]
    got = smi_stamps(cells, zone)
    assert got is not None
    np.testing.assert_array_equal(got, want)
    assert smi_stamps(["0000/01/01 00:00:00.000"], zone) is None
    assert smi_stamps(["2023/02/29 00:00:00.000"], zone) is None
    assert not math.isnan(smi_stamps(["2024/02/29 00:00:00"], zone)[0])  # type: ignore[index]


def _cell_value(cell: str, unit: str) -> float | None:
    """What the nvidia-smi cell reader makes of a cell: its number, or None where it refuses."""
    col = Column("power.draw", unit or None, Field("metric", Metric.POWER_AVG_W, unit))
    try:
        return number(cell.strip(), col, col.field, {}, path="t", line=1)  # type: ignore[arg-type]
    except InputError:
        return None


@pytest.mark.parametrize("unit", ["", "W"])
def test_smi_number_columns_accept_what_the_cell_reader_accepts(unit: str) -> None:
    """Every cell of up to 4 characters from digits, signs, `.`, `e`, blanks and the unit.

    A column with a cell it does not take is read cell by cell (the cell reader
    takes non-ASCII digits, as Python's float does).
    """
    alphabet = "1.+-eE \t" + unit
    cells = ["".join(c) for n in range(1, 5) for c in itertools.product(alphabet, repeat=n)] + [
        "5 W W",
        "W 5",
        "5 kW",
        "5W",
        "1e400",
        "١٢",
        "1_0",
        "nan",
        "inf",
        "0x1",
        " 5 W ",
    ]
    for cell in cells:
        want = _cell_value(cell, unit)
        got = fastcsv.numbers([cell], unit)
        if got is not None:  # what the column takes, the cell reader takes, with its value
            assert want is not None and got[0] == want, cell
        else:  # the column leaves to the cell reader only what is not plain ASCII
            assert want is None or not cell.isascii(), cell
        # and among other cells, one column: the same answer for the whole column
        column = fastcsv.numbers(["7", cell, "8 " + unit], unit)
        assert (column is None) == (got is None), cell


def test_smi_index_columns_accept_plain_indices_only() -> None:
    assert fastcsv.gpu_indices([" 0", "7 ", "\t12"]).tolist() == [0, 7, 12]  # type: ignore[union-attr]
    for bad in ["", "1 2", "+1", "-1", "1.0", "٣", "1e3", "999999999999999999999"]:
        assert fastcsv.gpu_indices(["0", bad]) is None, bad


# -- dcgmi dmon --------------------------------------------------------------------------

DMON_HEADER = "#Entity   POWER   SMACT  GPUTL  DVCCTR\nID        W\n"


def _dmon_rows(ticks: int, gpus: int = 4) -> list[str]:
    rows = []
    for k in range(ticks):
        if k and k % 14 == 0:
            rows.append(DMON_HEADER)  # dmon prints its header again every 14 ticks or so
        for g in range(gpus):
            smact = "N/A" if (k, g) == (5, 1) else f"{(k % 10) / 10:.3f}"
            rows.append(
                f"    GPU {g}   {100 + g + k % 7:.3f}   {smact}   {k % 100}   {k % 3 * 4}\n"
            )
    return rows


def test_dcgmi_columns_read_what_each_row_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dmon.txt"
    path.write_text(DMON_HEADER + "".join(_dmon_rows(3000)))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 32 << 10)
    rec = read_dcgmi(path, ImportOptions(interval_s=0.1))
    assert sorted(rec.series) == [0, 1, 2, 3] and rec.n_samples == 12000
    s = rec.series[1]
    np.testing.assert_allclose(s.t_s, np.arange(3000) * 0.1)
    k = np.arange(3000)
    np.testing.assert_array_equal(s.values[Metric.POWER_AVG_W], 101.0 + k % 7)
    want = (k % 10) / 10
    want[5] = np.nan
    np.testing.assert_array_equal(s.values[Metric.SM_ACTIVE_RATIO], want)
    np.testing.assert_array_equal(s.values[Metric.KERNEL_BUSY_RATIO], (k % 100) * 0.01)
    np.testing.assert_array_equal(s.values[Metric.CLOCKS_EVENT_REASONS], k % 3 * 4.0)


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ("GPU 2   100.0   nan     5   0", "SMACT", "must be a finite number"),
        ("GPU 2   100.0   0.5x    5   0", "SMACT", "must be a number or N/A"),
        ("GPU 2   100.0   1.5     5   0", "SMACT", "must be <= 1"),
        ("GPU 2   100.0   0.5     5   0x4", "DVCCTR", "must be a number or N/A"),
        ("GPU -1  100.0   0.5     5   0", None, "GPU id must be >= 0"),
        ("GPU 2   100.0   0.5     5", None, "expected an entity and 4 values"),
        # two bad cells on one line: the leftmost is named, as a row-by-row reader names it
        ("GPU 2   -5      1.5     5   0", "POWER", "must be >= 0"),
    ],
)
def test_dcgmi_bad_cell_deep_in_a_long_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: str, field: str | None, message: str
) -> None:
    rows = _dmon_rows(2000)
    bad = 6100
    assert rows[bad].split()[0] == "GPU"
    rows[bad] = row + "\n"
    rows[bad + 900] = "GPU 1   abc   0.5     5   0\n"  # a later error in an earlier column
    path = tmp_path / "dmon.txt"
    path.write_text(DMON_HEADER + "".join(rows))
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 32 << 10)
    with pytest.raises(InputError) as err:
        read_dcgmi(path)
    line = (DMON_HEADER + "".join(rows[:bad])).count("\n") + 1
    assert (err.value.line, err.value.field) == (line, field)
    assert message in str(err.value)


# -- telemetry CSV (any logger) ----------------------------------------------------------


def test_csv_table_split_a_block_at_a_time_reads_what_the_row_path_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bubblewatch.sources.importers import csv_header
    from bubblewatch.sources.importers.csv_table import read_csv_table

    lines = ["timestamp,phase,gpu,gpu_model,power_w,gpu_util_pct,sm_active"]
    for k in range(3000):
        for g in range(4):
            phase = "warmup" if k < 500 else "steady"
            lines.append(f"{1.7e9 + k / 10:.1f},{phase},{g}, NVIDIA H100 ,{300 + g},{k % 100},0.5")
    lines.insert(6000, "# a comment")
    lines.insert(7000, lines[0])  # the header again
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr("bubblewatch.sources.blocks.BLOCK_BYTES", 16 << 10)
    fast = read_csv_table(path)
    with monkeypatch.context() as m:
        m.setattr(csv_header, "_plain", lambda lines, header: False)
        _same(fast, read_csv_table(path))
    assert fast.n_samples == 12000 and fast.gpus[0].name == "NVIDIA H100"
