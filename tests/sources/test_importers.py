"""nvidia-smi and dcgmi importers, and format sniffing in load_recording, on realistic captures."""

from __future__ import annotations

import gzip
import shutil
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from importer_lines import parse_dcgmi, parse_nvidia_smi

from bubblewatch.errors import InputError
from bubblewatch.model import Metric
from bubblewatch.sources.importers import (
    ImportOptions,
    parse_time,
    read_dcgmi,
    read_nvidia_smi,
)
from bubblewatch.sources.load import load_recording, sniff_format

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "small-trace.jsonl"
SMI_FIELDS = (
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
)
T_FIRST = datetime(2026, 11, 29, 8, 14, 10, 123000, tzinfo=timezone.utc).timestamp()


def _lines(text: str) -> list[tuple[int, str, bool]]:
    return [(i, t, True) for i, t in enumerate(text.splitlines(), start=1)]


# -- nvidia-smi --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("nvidia_smi_units.csv", ImportOptions()),
        ("nvidia_smi_units.csv.gz", ImportOptions()),
        ("nvidia_smi_nounits.csv", ImportOptions()),
        ("nvidia_smi_noheader.csv", ImportOptions(fields=SMI_FIELDS)),
    ],
)
def test_nvidia_smi_variants_read_the_same(name: str, options: ImportOptions) -> None:
    rec = read_nvidia_smi(FIX / name, options)
    assert rec.gpu_indices == (0, 1, 2, 3)
    g0 = rec.gpus[0]
    assert g0.uuid == "GPU-3f2a6b1c-8d4e-4f5a-9b6c-7d8e9f0a1b2c"
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.power_limit_w == 700.0
    s0, s2 = rec.series[0], rec.series[2]
    assert len(s0) == 10
    assert s0.t_s[0] == pytest.approx(T_FIRST)
    np.testing.assert_allclose(np.diff(s0.t_s), 0.1, atol=1e-6)
    np.testing.assert_allclose(s0.values[Metric.POWER_AVG_W][:5], [180, 150, 150, 150, 180])
    np.testing.assert_allclose(s0.values[Metric.POWER_INSTANT_W][0], 183.5)
    np.testing.assert_allclose(s0.values[Metric.KERNEL_BUSY_RATIO], 1.0)  # 100 % -> ratio
    np.testing.assert_allclose(s0.values[Metric.SM_CLOCK_MHZ], 1980)
    np.testing.assert_allclose(rec.series[1].values[Metric.TEMPERATURE_C], 46)
    np.testing.assert_array_equal(rec.series[1].values[Metric.CLOCKS_EVENT_REASONS], 4)
    # [N/A] instant power on GPU 2: absent, not zero
    assert s2.get(Metric.POWER_INSTANT_W) is None
    assert rec.meta["unavailable_fields"] == {"power.draw.instant": "[N/A]"}
    assert rec.meta["source"] == "nvidia-smi" and rec.meta["timezone"] == "UTC"


def test_nvidia_smi_no_index_column_and_old_throttle_name() -> None:
    rec = read_nvidia_smi(FIX / "nvidia_smi_no_index_old_throttle.csv")
    assert rec.gpu_indices == (0, 1)  # numbered by position under each timestamp
    s0, s1 = rec.series[0], rec.series[1]
    assert len(s0) == len(s1) == 6
    np.testing.assert_allclose(s0.values[Metric.POWER_AVG_W], 62.5 + np.arange(6))
    np.testing.assert_allclose(s1.values[Metric.POWER_AVG_W], 63.5 + np.arange(6))
    np.testing.assert_array_equal(s0.values[Metric.CLOCKS_EVENT_REASONS], 1)  # GpuIdle
    np.testing.assert_array_equal(s1.values[Metric.CLOCKS_EVENT_REASONS], 4)  # SwPowerCap
    np.testing.assert_allclose(s1.values[Metric.SM_CLOCK_MHZ], 1110)
    assert Metric.POWER_INSTANT_W not in rec.metrics()  # [Not Supported] throughout
    # crosses midnight: 23:59:58.0 + 5 * 0.5 s
    start = datetime(2025, 3, 2, 23, 59, 58, tzinfo=timezone.utc).timestamp()
    np.testing.assert_allclose(s0.t_s, start + 0.5 * np.arange(6), atol=1e-6)


def test_nvidia_smi_no_index_by_gpu_count_when_timestamps_differ() -> None:
    text = (
        "timestamp, power.draw [W]\n"
        "2026/11/29 08:00:00.000, 100.00 W\n2026/11/29 08:00:00.004, 200.00 W\n"
        "2026/11/29 08:00:00.100, 101.00 W\n2026/11/29 08:00:00.104, 201.00 W\n"
    )
    # Regression: rows a few ms apart within a tick used to be read as one GPU.
    by_timing = parse_nvidia_smi(_lines(text))
    assert by_timing.gpu_indices == (0, 1)
    rec = parse_nvidia_smi(_lines(text), options=ImportOptions(gpu_count=2))
    np.testing.assert_allclose(rec.series[1].values[Metric.POWER_AVG_W], [200, 201])


def test_nvidia_smi_uuid_without_index() -> None:
    text = (
        "timestamp, uuid, utilization.gpu [%]\n"
        "2026/11/29 08:00:00.000, GPU-b, 10 %\n2026/11/29 08:00:00.000, GPU-a, 20 %\n"
        "2026/11/29 08:00:01.000, GPU-b, 30 %\n2026/11/29 08:00:01.000, GPU-a, 40 %\n"
    )
    rec = parse_nvidia_smi(_lines(text))
    assert [g.uuid for g in rec.gpus] == ["GPU-b", "GPU-a"]
    np.testing.assert_allclose(rec.series[1].values[Metric.KERNEL_BUSY_RATIO], [0.2, 0.4])


def test_nvidia_smi_row_without_index_uuid_or_timestamp_asks_for_the_gpu_count() -> None:
    text = "uuid, power.draw [W]\nGPU-a, 100 W\n , 90 W\n"
    with pytest.raises(
        InputError,
        match=r"<input>:3: field .uuid.: no index, uuid or timestamp in this row: "
        r"give the number of GPUs \(--gpu-count\)",
    ):
        parse_nvidia_smi(_lines(text), options=ImportOptions(interval_s=1.0))
    counted = parse_nvidia_smi(_lines(text), options=ImportOptions(interval_s=1.0, gpu_count=1))
    assert len(counted.gpus) == 1


def test_nvidia_smi_timezone_option() -> None:
    text = "timestamp, index, power.draw [W]\n2026/11/29 08:14:10.123, 0, 100.00 W\n"
    utc = parse_nvidia_smi(_lines(text)).start_s
    berlin = parse_nvidia_smi(_lines(text), options=ImportOptions(tz="Europe/Berlin")).start_s
    plus2 = parse_nvidia_smi(_lines(text), options=ImportOptions(tz="+02:00")).start_s
    assert utc - berlin == pytest.approx(3600)  # CET in November
    assert utc - plus2 == pytest.approx(7200)


def test_nvidia_smi_without_timestamp_uses_interval() -> None:
    text = "index, power.draw\n0, 100\n1, 200\n0, 101\n1, 201\n"
    opts = ImportOptions(interval_s=0.5, start_s=1000.0)
    rec = parse_nvidia_smi(_lines(text), options=opts)
    np.testing.assert_allclose(rec.series[1].t_s, [1000.0, 1000.5])


def test_nvidia_smi_power_draw_wins_over_power_draw_average() -> None:
    text = (
        "timestamp, index, power.draw [W], power.draw.average [W]\n"
        "2026/11/29 08:00:00.000, 0, 1 W, 2 W\n"
    )
    rec = parse_nvidia_smi(_lines(text))
    assert rec.series[0].values[Metric.POWER_AVG_W][0] == 1.0
    assert rec.meta["ignored_fields"] == ["power.draw.average"]


def test_nvidia_smi_a100_keeps_its_power_reading() -> None:
    """Regression: on GA100 power.draw.average is [N/A]; preferring it lost the A100's power."""
    text = (
        "timestamp, index, name, power.draw [W], power.draw.average [W], utilization.gpu [%]\n"
        "2026/11/29 08:00:00.000, 0, NVIDIA A100-SXM4-80GB, 61.20 W, [N/A], 0 %\n"
        "2026/11/29 08:00:01.000, 0, NVIDIA A100-SXM4-80GB, 250.10 W, [N/A], 100 %\n"
    )
    rec = parse_nvidia_smi(_lines(text))
    assert rec.series[0].values[Metric.POWER_AVG_W].tolist() == [61.2, 250.1]
    assert rec.gpus[0].name == "NVIDIA A100-SXM4-80GB"


def test_nvidia_smi_repeated_header_and_killed_mid_line(tmp_path: Path) -> None:
    src = (FIX / "nvidia_smi_units.csv").read_text().splitlines()
    text = "\n".join([*src[:5], src[0], *src[5:9]]) + "\n" + src[9][:40]  # no final newline
    path = tmp_path / "cut.csv"
    path.write_text(text)
    rec = read_nvidia_smi(path)
    assert rec.n_samples == 8 and rec.meta["truncated"] is True


HDR = "timestamp, index, power.draw [W], utilization.gpu [%], clocks_event_reasons.active"
ROW = "2026/11/29 08:14:10.123, 0, 100.00 W, 50 %, 0x0000000000000000"


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (f"{HDR}\n{ROW}\n2026/11/29 08:14:10.223, 0, 100.00 W, 50 %\n{ROW}", 3, None, "expected 5"),
        (f"{HDR}\n{ROW.replace('100.00 W', '100.00 MHz')}", 2, "power.draw", "unit 'MHz'"),
        (f"{HDR}\n{ROW.replace('100.00 W', 'lots')}", 2, "power.draw", "must be a number"),
        (f"{HDR}\n{ROW.replace('100.00 W', '-5.00 W')}", 2, "power.draw", "must be >= 0 W"),
        (f"{HDR}\n{ROW.replace('50 %', '250 %')}", 2, "utilization.gpu", "<= 1"),
        (f"{HDR}\n{ROW.replace(', 0,', ', zero,')}", 2, "index", "must be a GPU index"),
        (f"{HDR}\n{ROW.replace('2026/11/29', '29.11.2026')}", 2, "timestamp", "YYYY/MM/DD"),
        (f"{HDR}\n{ROW.replace('0x0000000000000000', '0xZZ')}", 2, "clocks_event", "bitmask"),
        ("timestamp, power.draw [mW]\n", 1, "power.draw", "unit [mW]"),
        ("timestamp, index, fan.speed [%]\n", 1, None, "no field bubblewatch can use"),
        ("index, power.draw [W]\n0, 5 W\n", 1, None, "no timestamp column"),
        (ROW, 1, None, "--format=csv,noheader"),
        ("\n\n", 1, None, "empty file"),
    ],
)
def test_nvidia_smi_errors(text: str, line: int, field: str | None, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_nvidia_smi(_lines(text), path="smi.csv")
    e = err.value
    assert e.path == "smi.csv" and e.line == line, str(e)
    if field is not None:
        assert e.field is not None and e.field.startswith(field)
    assert message in str(e)


def test_nvidia_smi_fields_disagreeing_with_header() -> None:
    opts = ImportOptions(fields=("timestamp", "index"))
    with pytest.raises(InputError, match="--fields gave timestamp, index"):
        parse_nvidia_smi(_lines(f"{HDR}\n{ROW}\n"), options=opts)


# -- dcgmi dmon ----------------------------------------------------------------


def test_dcgmi_realistic_capture_with_repeated_headers() -> None:
    rec = read_dcgmi(FIX / "dcgmi_dmon_pp4.txt")
    assert rec.gpu_indices == (0, 1, 2, 3)
    s0 = rec.series[0]
    assert len(s0) == 32 and all(len(rec.series[g]) == 32 for g in range(4))
    start = datetime(2026, 11, 29, 8, 14, 10, tzinfo=timezone.utc).timestamp()
    np.testing.assert_allclose(s0.t_s, start + 0.1 * np.arange(32), atol=1e-6)  # comment
    assert rec.meta["interval_from"] == "comment" and rec.meta["start_from"] == "comment"
    assert s0.values[Metric.POWER_AVG_W][0] == pytest.approx(158.8)
    np.testing.assert_allclose(s0.values[Metric.KERNEL_BUSY_RATIO], 1.0)  # GPUTL, not GRACT
    assert s0.values[Metric.SM_ACTIVE_RATIO][0] == pytest.approx(0.22)
    assert s0.values[Metric.SM_OCCUPANCY_RATIO][0] == pytest.approx(0.121)
    np.testing.assert_allclose(s0.values[Metric.SM_CLOCK_MHZ], 1980)
    np.testing.assert_allclose(rec.series[3].values[Metric.TEMPERATURE_C], 47)
    assert s0.values[Metric.PCIE_TX_BYTES_PER_S][1] == 273835455
    assert rec.series[3].get(Metric.TENSOR_ACTIVE_RATIO) is None  # N/A throughout
    assert "GRACT" in rec.meta["ignored_fields"]


def test_dcgmi_options_override_comment() -> None:
    rec = read_dcgmi(FIX / "dcgmi_dmon_pp4.txt", ImportOptions(start_s=0.0, interval_s=0.25))
    np.testing.assert_allclose(rec.series[2].t_s[:3], [0.0, 0.25, 0.5])
    assert rec.meta["interval_from"] == "options"


def test_dcgmi_old_header_mig_rows_and_gract_fallback() -> None:
    rec = read_dcgmi(FIX / "dcgmi_dmon_mig_old_header.txt")
    assert rec.gpu_indices == (0, 1)
    s0 = rec.series[0]
    np.testing.assert_allclose(s0.t_s, [0.0, 1.0, 2.0])  # no comment: relative, 1 s default
    assert rec.meta["start_from"].startswith("none")
    np.testing.assert_allclose(s0.values[Metric.KERNEL_BUSY_RATIO], 0.429)  # from GRACT
    assert rec.series[1].values == {}  # all N/A: reports nothing
    assert rec.meta["skipped_non_gpu_rows"] == 6
    assert rec.meta["ignored_fields"] == ["DRAMA"]


def test_dcgmi_units_energy_and_fallback_pcie() -> None:
    text = (
        "#Entity   TOTEC                     TXTPT          DVCCTR\n"
        "ID         mJ                       KB/s\n"
        "GPU 0     8123456789                1000           4\n"
    )
    v = parse_dcgmi(_lines(text)).series[0].values
    assert v[Metric.ENERGY_J][0] == pytest.approx(8123456.789)
    assert v[Metric.PCIE_TX_BYTES_PER_S][0] == 1024000
    assert v[Metric.CLOCKS_EVENT_REASONS][0] == 4


def test_dcgmi_killed_mid_row(tmp_path: Path) -> None:
    text = (FIX / "dcgmi_dmon_pp4.txt").read_text()
    cut = text.index("GPU 2", 2000) + 20
    path = tmp_path / "cut.txt"
    path.write_text(text[:cut])
    rec = read_dcgmi(path)
    assert rec.meta["truncated"] is True
    assert len(rec.series[0]) == len(rec.series[2]) + 1


H = "#Entity   POWER             SMACT\nID         W\n"


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (H + "GPU 0     150.1\nGPU 1     1.0    0.1\n", 3, None, "expected an entity and 2 values"),
        (H + "GPU 0     150.1             lots\n", 3, "SMACT", "must be a number or N/A"),
        (H + "GPU 0     150.1             7.5\n", 3, "SMACT", "<= 1"),
        (H + "GPU x     150.1             0.5\n", 3, None, "entity id must be an integer"),
        (H + "hello there\nGPU 0 1 1\n", 3, None, "unrecognised line"),
        ("GPU 0     150.1             0.5\n" + H, 1, None, "'#Entity' header"),
        ("#Entity   FBUSD   DRAMA\nID\n", 1, None, "no field bubblewatch can use"),
        ("Error setting watches. Result: -29: Requires root\n", 1, None, "dcgmi reported"),
        ("# dcgmi dmon -e 155 -d 0\n" + H, 1, "interval", "> 0 ms"),
        ("# start=yesterday\n" + H, 1, "start", "cannot read time"),
        ("", 1, None, "no '#Entity' header"),
    ],
)
def test_dcgmi_errors(text: str, line: int, field: str | None, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_dcgmi(_lines(text), path="dmon.txt")
    e = err.value
    assert e.path == "dmon.txt" and e.line == line, str(e)
    assert e.field == field
    assert message in str(e)


# -- options, sniffing, load_recording -----------------------------------------


def test_parse_time_and_options_validation() -> None:
    assert parse_time("1795940050.5") == 1795940050.5
    assert parse_time("2026-11-29T08:14:10Z") == parse_time("2026-11-29T09:14:10", "+01:00")
    for bad in (
        {"format": "xlsx"},
        {"interval_s": 0.0},
        {"gpu_count": 0},
        {"tz": "Mars/Olympus"},
        {"fields": ()},
    ):
        with pytest.raises(ValueError):
            ImportOptions(**bad)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (EXAMPLE, "trace"),
        (FIX / "nvidia_smi_units.csv", "nvidia-smi"),
        (FIX / "nvidia_smi_units.csv.gz", "nvidia-smi"),
        (FIX / "nvidia_smi_noheader.csv", "nvidia-smi"),
        (FIX / "nvidia_smi_no_index_old_throttle.csv", "nvidia-smi"),
        (FIX / "dcgmi_dmon_pp4.txt", "dcgmi"),
        (FIX / "dcgmi_dmon_mig_old_header.txt", "dcgmi"),
    ],
)
def test_sniff_format(path: Path, expected: str) -> None:
    assert sniff_format(path) == expected


def test_sniff_gzip_trace(tmp_path: Path) -> None:
    gz = tmp_path / "trace.data"
    gz.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    assert sniff_format(gz) == "trace"
    assert load_recording(gz).n_samples == 6


def test_load_recording_auto_and_explicit(tmp_path: Path) -> None:
    assert load_recording(EXAMPLE).n_samples == 6
    rec = load_recording(FIX / "dcgmi_dmon_pp4.txt", interval_s=0.2, start_s=10.0)
    assert rec.series[0].t_s[1] == pytest.approx(10.2)
    noheader = FIX / "nvidia_smi_noheader.csv"
    rec = load_recording(noheader, "nvidia-smi", ImportOptions(fields=SMI_FIELDS, tz="+01:00"))
    assert rec.start_s == pytest.approx(T_FIRST - 3600)
    # a name that says nothing: content decides
    odd = tmp_path / "capture.log"
    shutil.copy(FIX / "nvidia_smi_units.csv", odd)
    assert load_recording(odd).gpu_indices == (0, 1, 2, 3)


def test_load_recording_errors(tmp_path: Path) -> None:
    unknown = tmp_path / "x.txt"
    unknown.write_text("hello world\n")
    with pytest.raises(InputError) as err:
        load_recording(unknown)
    msg = str(err.value)
    assert "hello world" in msg and all(
        f in msg for f in ("trace:", "nvidia-smi:", "dcgmi:", "csv:")
    )
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(InputError, match="empty file"):
        load_recording(empty)
    with pytest.raises(InputError, match="unknown format 'xlsx'"):
        load_recording(EXAMPLE, format="xlsx")
    with pytest.raises(InputError, match="cannot open"):
        load_recording(tmp_path / "missing.csv")
    with pytest.raises(TypeError, match="unknown import option"):
        load_recording(EXAMPLE, interval=1.0)
    with pytest.raises(InputError, match="--fields"):  # noheader needs the field list
        load_recording(FIX / "nvidia_smi_noheader.csv")
