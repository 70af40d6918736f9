"""Damaged input is said: a trace or CSV cut short or partly corrupt is read as far as it goes."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sources.load import load_recording
from bubblewatch.sources.trace import read_trace, write_trace


def _write_nvidia_smi(rec: Recording, path: Path) -> None:
    """`nvidia-smi --query-gpu=timestamp,index,power.draw,utilization.gpu --format=csv`."""
    rows = ["timestamp, index, power.draw [W], utilization.gpu [%]"]
    for s in rec.samples():
        ts = datetime.fromtimestamp(s.t_s, tz=timezone.utc).strftime("%Y/%m/%d %H:%M:%S.%f")
        power = s.values[Metric.POWER_AVG_W]
        util = 100 * s.values[Metric.KERNEL_BUSY_RATIO]
        rows.append(f"{ts[:-3]}, {s.gpu}, {power:.2f} W, {util:.0f} %")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("damaged")
    res = simulate(load_scenario("pp4-throttled"), duration_s=30.0, seed=0)
    rec = observe(res, interval_s=0.5, seed=0)
    out = {"plain": d / "t.jsonl", "gz": d / "t.jsonl.gz", "smi": d / "t.csv"}
    write_trace(out["plain"], rec)
    write_trace(out["gz"], rec)
    _write_nvidia_smi(rec, out["smi"])
    return out


def _samples_before(lines: list[bytes], n_lines: int) -> int:
    return sum(b'"type":"sample"' in x for x in lines[:n_lines])


@pytest.mark.parametrize("share", [0.2, 0.5, 0.77, 0.999])
def test_plain_trace_cut_mid_record(sim: dict[str, Path], tmp_path: Path, share: float) -> None:
    data = sim["plain"].read_bytes()
    lines = data.split(b"\n")
    starts = np.cumsum([0] + [len(x) + 1 for x in lines])
    cut = int(len(data) * share)
    if cut in starts:
        cut += 1  # inside a record, not at its start
    part = tmp_path / "cut.jsonl"
    part.write_bytes(data[:cut])
    rec = read_trace(part)
    k = int(np.searchsorted(starts, cut, side="right")) - 1  # 0-based line the cut is in
    assert rec.meta["truncated"] is True
    assert rec.meta["truncation"] == {
        "line": k + 1,
        "byte": int(starts[k]),
        "reason": "the last line is cut mid-record",
    }
    assert rec.n_samples == _samples_before(lines, k)


def test_plain_trace_cut_between_records_is_whole(sim: dict[str, Path], tmp_path: Path) -> None:
    data = sim["plain"].read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    part = tmp_path / "cut.jsonl"
    part.write_bytes(data[:cut])
    assert "truncated" not in read_trace(part).meta


@pytest.mark.parametrize("share", [0.1, 0.35, 0.6, 0.9])
def test_gzip_trace_cut_mid_block(sim: dict[str, Path], tmp_path: Path, share: float) -> None:
    data = sim["gz"].read_bytes()
    text = gzip.decompress(data)
    part = tmp_path / "cut.jsonl.gz"
    part.write_bytes(data[: int(len(data) * share)])
    rec = read_trace(part)
    cut = rec.meta["truncation"]
    assert rec.meta["truncated"] is True and cut["reason"] == "the gzip stream ends early"
    # Everything before the named line and byte was read, and it is the file's own text.
    lines = text.split(b"\n")
    assert cut["byte"] == sum(len(x) + 1 for x in lines[: cut["line"] - 1])
    assert 0 < rec.n_samples == _samples_before(lines, cut["line"] - 1)


def test_gzip_trace_corrupt_in_the_middle(sim: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(sim["gz"].read_bytes())
    middle = len(data) // 2
    for i in range(middle, middle + 40):
        data[i] ^= 0x5A
    part = tmp_path / "corrupt.jsonl.gz"
    part.write_bytes(bytes(data))
    rec = read_trace(part)
    cut = rec.meta["truncation"]
    assert rec.meta["truncated"] is True
    assert "corrupt gzip data" in cut["reason"] or "ends early" in cut["reason"]
    whole = read_trace(sim["gz"])
    assert 0 < rec.n_samples < whole.n_samples
    # What was read is what the file holds up to the damage, sample for sample.
    for g, s in rec.series.items():
        np.testing.assert_array_equal(s.t_s, whole.series[g].t_s[: len(s)])


def test_nvidia_smi_csv_cut_mid_line(sim: dict[str, Path], tmp_path: Path) -> None:
    data = sim["smi"].read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 20
    part = tmp_path / "cut.csv"
    part.write_bytes(data[:cut])
    rec = load_recording(part, format="nvidia-smi")
    line = data[:cut].count(b"\n") + 1
    assert rec.meta["truncated"] is True
    assert rec.meta["truncation"]["line"] == line
    assert rec.meta["truncation"]["byte"] == data.rindex(b"\n", 0, cut) + 1


def test_analyze_says_so_and_exits_0(sim: dict[str, Path], tmp_path: Path, capsys) -> None:
    # Regression: a cut file was analysed with exit 0 and no notice at all.
    data = sim["gz"].read_bytes()
    part = tmp_path / "cut.jsonl.gz"
    part.write_bytes(data[: len(data) // 2])
    assert main(["analyze", str(part)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"warning: {part}: the file is damaged at line ")
    assert "the gzip stream ends early; analysed up to there" in text
    assert main(["analyze", str(part), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["truncated"] is True
    assert set(out["truncation"]) == {"line", "byte", "reason"}
    assert main(["analyze", str(sim["gz"]), "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["truncated"] is False and "truncation" not in whole


def test_compare_and_a_directory_say_which_file_is_cut(
    sim: dict[str, Path], tmp_path: Path, capsys
) -> None:
    data = sim["plain"].read_bytes()
    part = tmp_path / "cut.jsonl"
    part.write_bytes(data[: len(data) // 3])
    assert main(["compare", str(sim["plain"]), str(part), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["truncated"] == {"before": False, "after": True}
    assert main(["compare", str(sim["plain"]), str(part)]) == 0
    assert capsys.readouterr().out.startswith(f"warning: {part}: the file is damaged at line ")
    # A directory read as one recording names its cut file, not a line of another one.
    d = tmp_path / "dir"
    d.mkdir()
    header, *records = data.split(b"\n")
    half = len(records) // 2
    (d / "a.jsonl").write_bytes(b"\n".join([header, *records[:half]]) + b"\n")
    rest = b"\n".join([header, *records[half:]])
    (d / "b.jsonl").write_bytes(rest[: len(rest) // 2])
    assert main(["analyze", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["truncated"] is True and out["truncated_files"] == [str(d / "b.jsonl")]
    assert "truncation" not in out
