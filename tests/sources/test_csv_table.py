"""The generic telemetry CSV importer: layouts, times, spellings, mapping, annotations, errors."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from importer_lines import parse_csv_table

from bubblewatch.errors import InputError
from bubblewatch.model import Metric
from bubblewatch.sources.importers.csv_table import read_csv_table
from bubblewatch.sources.importers.import_options import ImportOptions, parse_columns
from bubblewatch.sources.load import load_recording, sniff_format

T0 = 1775333003.0


def _lines(text: str, ended_last: bool = True) -> list[tuple[int, str, bool]]:
    rows = text.splitlines()
    return [(i, t, ended_last or i < len(rows)) for i, t in enumerate(rows, start=1)]


def _parse(text: str, **options: object) -> object:
    return parse_csv_table(_lines(text), path="t.csv", options=ImportOptions(**options))  # type: ignore[arg-type]


# A DCGM logger's long layout (one row per GPU per tick), epoch seconds and a phase label.
DCGM_LONG = """\
timestamp,phase,gpu,gpu_model,power_w,gpu_util_pct,sm_active,mem_used_mib,energy_mj,\
throttle_reasons,mem_total_mib
1775333003.425,warmup,0,NVIDIA H100 80GB HBM3,120.5,0,0.000000,17000,1000000,1,81559
1775333003.425,warmup,1,NVIDIA H100 80GB HBM3,121.0,0,0.000000,17010,2000000,1,81559
1775333003.525,steady,0,NVIDIA H100 80GB HBM3,430.0,100,0.540000,31000,1000043,0,81559
1775333003.525,steady,1,NVIDIA H100 80GB HBM3,425.0,99,0.520000,31010,2000042,0,81559
1775333003.625,steady,0,NVIDIA H100 80GB HBM3,428.0,100,0.530000,31000,1000086,0,81559
1775333003.625,steady,1,NVIDIA H100 80GB HBM3,,99,N/A,31010,2000085,0,81559
"""


def test_long_layout_epoch_seconds_units_and_annotations() -> None:
    rec = _parse(DCGM_LONG)
    assert rec.gpu_indices == (0, 1)
    assert rec.gpus[0].name == "NVIDIA H100 80GB HBM3" and rec.gpus[0].power_limit_w is None
    s0, s1 = rec.series[0], rec.series[1]
    np.testing.assert_allclose(s0.t_s, 1775333003.425 + 0.1 * np.arange(3), atol=1e-6)
    np.testing.assert_allclose(s0.values[Metric.POWER_AVG_W], [120.5, 430.0, 428.0])
    np.testing.assert_allclose(s0.values[Metric.KERNEL_BUSY_RATIO], [0.0, 1.0, 1.0])  # pct
    np.testing.assert_allclose(s0.values[Metric.SM_ACTIVE_RATIO], [0.0, 0.54, 0.53])
    np.testing.assert_allclose(s0.values[Metric.MEMORY_USED_BYTES][0], 17000 * 1024**2)
    np.testing.assert_allclose(s0.values[Metric.ENERGY_J], [1000.0, 1000.043, 1000.086])
    np.testing.assert_array_equal(s0.values[Metric.CLOCKS_EVENT_REASONS], [1, 0, 0])
    # empty and N/A cells are absent, never zero
    assert np.isnan(s1.values[Metric.POWER_AVG_W][2])
    assert np.isnan(s1.values[Metric.SM_ACTIVE_RATIO][2])
    assert rec.meta["layout"] == "long" and rec.meta["time_format"] == "epoch seconds"
    assert rec.meta["ignored_fields"] == ["mem_total_mib"]
    assert rec.meta["annotations"] == ["phase"]
    phases = [(e.t_s, e.detail["value"]) for e in rec.events if e.kind == "annotation"]
    assert phases == [
        (pytest.approx(1775333003.425), "warmup"),
        (pytest.approx(1775333003.525), "steady"),
    ]


def test_iso_timestamps_and_other_spellings() -> None:
    # karpathy/nanoGPT pull request 643's gpu_profiler.sh output
    text = (
        "timestamp,gpu_index,temperature_C,utilization_gpu_percent,power_W\n"
        "2025-09-24T03:48:33.493Z,0, 38, 100, 387.26\n"
        "2025-09-24T03:48:33.493Z,1, 60, 100, 422.55\n"
        "2025-09-24T03:48:33.788Z,0, 38, 50, 387.36\n"
        "2025-09-24T03:48:33.788Z,1, 60, 0, 422.73\n"
    )
    rec = _parse(text)
    t0 = datetime(2025, 9, 24, 3, 48, 33, 493000, tzinfo=timezone.utc).timestamp()
    np.testing.assert_allclose(rec.series[1].t_s, [t0, t0 + 0.295], atol=1e-6)
    np.testing.assert_allclose(rec.series[0].values[Metric.KERNEL_BUSY_RATIO], [1.0, 0.5])
    np.testing.assert_allclose(rec.series[1].values[Metric.TEMPERATURE_C], [60, 60])
    assert rec.meta["time_format"] == "ISO 8601"


def test_naive_times_are_read_in_the_given_zone() -> None:
    text = "time,gpu,power\n2025-07-27 00:47:09.120,0,100\n2025-07-27 00:47:10.120,0,101\n"
    utc = _parse(text).start_s
    assert utc - _parse(text, tz="+02:00").start_s == pytest.approx(7200)


@pytest.mark.parametrize(
    ("stamp", "scale"),
    [("1775333003425", 1e-3), ("1775333003425000", 1e-6), ("1775333003425000000", 1e-9)],
)
def test_epoch_in_milli_micro_and_nanoseconds(stamp: str, scale: float) -> None:
    rec = _parse(f"ts,device,watts\n{stamp},0,100\n")
    assert rec.start_s == pytest.approx(1775333003.425)


def test_nvidia_smi_timestamps_gpu_names_and_units_in_values() -> None:
    text = (
        "Time, GPU, Power Draw (mW), Utilization (%), Memory Used (GiB)\n"
        "2025/07/27 00:22:27.858, GPU 0, 71250 mW, 5 %, 1\n"
        "2025/07/27 00:22:27.862, GPU 1, 72480 mW, 7 %, 2\n"
    )
    rec = _parse(text)
    assert rec.gpu_indices == (0, 1)
    np.testing.assert_allclose(rec.series[0].values[Metric.POWER_AVG_W], [71.25])
    np.testing.assert_allclose(rec.series[1].values[Metric.KERNEL_BUSY_RATIO], [0.07])
    np.testing.assert_allclose(rec.series[1].values[Metric.MEMORY_USED_BYTES], [2 * 1024**3])
    assert rec.meta["time_format"] == "nvidia-smi"


def test_wide_layout() -> None:
    text = (
        "time_s,gpu0_power_w,gpu1_power_w,sm_active_0,sm_active_1,note\n"
        "0.0,100,200,0.1,0.9,start\n"
        "0.5,110,210,0.2,0.8,start\n"
        "1.0,120,220,0.3,0.7,end\n"
    )
    rec = _parse(text, start_s=T0)
    assert rec.meta["layout"] == "wide" and rec.gpu_indices == (0, 1)
    np.testing.assert_allclose(rec.series[0].t_s, T0 + np.array([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(rec.series[1].values[Metric.POWER_AVG_W], [200, 210, 220])
    np.testing.assert_allclose(rec.series[1].values[Metric.SM_ACTIVE_RATIO], [0.9, 0.8, 0.7])
    assert [e.detail["value"] for e in rec.events] == ["start", "end"]


def test_single_gpu_file_and_interval_without_time() -> None:
    rec = _parse("power_draw,utilization_gpu\n100,50\n110,60\n", interval_s=0.5, start_s=T0)
    assert rec.gpu_indices == (0,)
    np.testing.assert_allclose(rec.series[0].t_s, [T0, T0 + 0.5])
    assert rec.meta["time_format"] == "rebuilt from --interval"


def test_hosts_numbered_host_by_host_and_uuids() -> None:
    text = (
        "timestamp,hostname,gpu,power_w\n"
        "1775333003.0,node-b,0,10\n1775333003.0,node-b,1,11\n"
        "1775333003.0,node-a,0,20\n1775333003.0,node-a,1,21\n"
        "1775333004.0,node-b,0,12\n1775333004.0,node-b,1,13\n"
        "1775333004.0,node-a,0,22\n1775333004.0,node-a,1,23\n"
    )
    rec = _parse(text)
    assert [(g.index, g.host) for g in rec.gpus] == [
        (0, "node-b"),
        (1, "node-b"),
        (2, "node-a"),
        (3, "node-a"),
    ]
    np.testing.assert_allclose(rec.series[2].values[Metric.POWER_AVG_W], [20, 22])
    uuid = _parse("ts,uuid,power\n1775333003,GPU-bb,1\n1775333003,GPU-aa,2\n1775333004,GPU-bb,3\n")
    assert [g.uuid for g in uuid.gpus] == ["GPU-bb", "GPU-aa"]
    np.testing.assert_allclose(uuid.series[0].values[Metric.POWER_AVG_W], [1, 3])


def test_column_mapping_for_unknown_names() -> None:
    text = "t,card,Leistung,busy\n1775333003,0,100,50\n1775333004,0,110,100\n"
    with pytest.raises(InputError, match="not GPU telemetry"):
        _parse(text)
    cols = parse_columns("time=t,gpu=card,power_avg_w=Leistung,kernel_busy_ratio=busy@percent")
    rec = _parse(text, columns=cols)
    np.testing.assert_allclose(rec.series[0].values[Metric.POWER_AVG_W], [100, 110])
    np.testing.assert_allclose(rec.series[0].values[Metric.KERNEL_BUSY_RATIO], [0.5, 1.0])
    # mapping wins over recognition: this 'power' column is in milliwatts
    rec = _parse(
        "ts,gpu,power\n1775333003,0,250000\n", columns=parse_columns("power_avg_w=power@mw")
    )
    np.testing.assert_allclose(rec.series[0].values[Metric.POWER_AVG_W], [250.0])


def test_repeated_header_and_line_cut_short(tmp_path: Path) -> None:
    head = "timestamp,gpu,power_w\n"
    text = head + "1775333003,0,100\n" + head + "1775333004,0,110\n1775333005,0"
    rec = parse_csv_table(_lines(text, ended_last=False), path="t.csv")
    np.testing.assert_allclose(rec.series[0].values[Metric.POWER_AVG_W], [100, 110])
    p = tmp_path / "cut.csv"
    p.write_text(text)
    assert read_csv_table(p).meta["truncated"] is True


@pytest.mark.parametrize(
    ("text", "options", "line", "field", "message"),
    [
        (
            "timestamp,gpu,power_w\n1775333003,0,lots\n",
            {},
            2,
            "power_w",
            "must be a number, got 'lots'",
        ),
        ("timestamp,gpu,power_w\n1775333003,0,-5\n", {}, 2, "power_w", "must be in [0, ]"),
        (
            "timestamp,gpu,sm_active\n1775333003,0,0.5\n1775333004,0,3.5\n",
            {},
            3,
            "sm_active",
            "got 3.5",
        ),
        (
            "timestamp,gpu,power_w\nyesterday,0,100\n",
            {},
            2,
            "timestamp",
            "cannot read time 'yesterday'",
        ),
        ("timestamp,gpu,power_w\n1775333003,,100\n", {}, 2, "gpu", "must name the GPU"),
        (
            "timestamp,gpu,power_w\n1775333003,0\n1775333004,0,1\n",
            {},
            2,
            None,
            "expected 3 comma-separated fields",
        ),
        ("gpu,power_w\n0,100\n", {}, 1, None, "no time column"),
        ("timestamp,phase,host\n1,a,b\n", {}, 1, None, "not GPU telemetry"),
        ("timestamp,gpu,power_w\n", {}, 1, None, "no data rows"),
        ("", {}, None, None, "empty file"),
        (
            "timestamp,gpu,power_w\n1,0,1\n",
            {"columns": (("power_avg_w", "Watts"),)},
            1,
            "Watts",
            "--columns maps 'power_avg_w' to 'Watts', which the header does not have",
        ),
        (
            "timestamp,gpu,power_w\n1,0,1\n",
            {"columns": (("watts", "power_w"),)},
            None,
            None,
            "unknown metric 'watts'",
        ),
        (
            "timestamp,gpu,power_w\n1,0,1\n",
            {"columns": (("power_avg_w", "power_w@furlongs"),)},
            None,
            None,
            "unknown unit 'furlongs'",
        ),
    ],
)
def test_errors_name_file_line_and_field(
    text: str, options: dict[str, object], line: int | None, field: str | None, message: str
) -> None:
    with pytest.raises(InputError) as err:
        _parse(text, **options)
    e = err.value
    assert e.path == "t.csv" and e.line == line and e.field == field, str(e)
    assert message in str(e)


def test_parse_columns_errors() -> None:
    assert parse_columns(" gpu = card , time=t ") == (("gpu", "card"), ("time", "t"))
    for bad in ("gpu", "=card", "gpu=", ","):
        with pytest.raises(ValueError):
            parse_columns(bad)


def test_sniffing_routes_generic_csv_and_refuses_other_files(tmp_path: Path) -> None:
    ath = tmp_path / "telemetry.csv"
    ath.write_text(DCGM_LONG)
    assert sniff_format(ath) == "csv"
    assert load_recording(ath).gpu_indices == (0, 1)
    wide = tmp_path / "wide.csv"
    wide.write_text("time_s,gpu0_power_w,gpu1_power_w\n0,1,2\n")
    assert sniff_format(wide) == "csv"
    sales = tmp_path / "sales.csv"
    sales.write_text("date,region,revenue\n2025-01-01,north,100\n")
    with pytest.raises(InputError) as err:
        load_recording(sales)
    msg = str(err.value)
    assert "not telemetry" in msg and "date,region,revenue" in msg and "csv:" in msg
    # --format csv on the same file says what it expected
    with pytest.raises(InputError, match="no column names a per-GPU measurement"):
        load_recording(sales, format="csv")
