"""GPU indices, wide CSV headers, bitmasks and byte order marks in recorded inputs.

Pins (issue 22, items 6, 8 and 9): a wide CSV of 20,000 GPUs took 25 s and one
of 200,000 ran for minutes (the importer looped over every column for every
GPU), with no bound like a trace's 1024 GPUs; a 2.2 M-cell header took 853 MB.
A GPU index of 20 digits in a CSV was an OverflowError, of 5000 digits
Python's digit-limit ValueError; nvidia-smi's `index` and dcgmi's entity id
alike; a Kineto `device: 2**40` passed the documented limit of 1048575; a CSV
saved with a UTF-8 byte order mark had "no time column".
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.limits import (
    CSV_MAX_COLUMNS,
    CSV_MAX_GPUS,
    KINETO_MAX_RANK,
    MAX_GPU_INDEX,
    decimal,
)
from bubblewatch.sources.load import load_recording
from bubblewatch.sources.prometheus_history.fleet import pipelines_from_info

from .test_recorded_inputs import FIXTURES, KINETO_HEAD, SMI_HEADER, refused, write


def wide_csv(n_gpus: int, fields: tuple[str, ...] = ("power_w", "sm_active"), rows: int = 3) -> str:
    header = ",".join(f"gpu{g}_{f}" for g in range(n_gpus) for f in fields)
    row = ",".join("0.5" for _ in range(n_gpus * len(fields)))
    return f"time,{header}\n" + "".join(f"{t},{row}\n" for t in range(rows))


# -- wide CSV ---------------------------------------------------------------------------


def test_wide_csv_at_the_gpu_bound_reads_in_linear_time(tmp_path: Path) -> None:
    """1024 GPUs x 4 fields took 9 s at 4000 GPUs x 1 (one pass over the columns per GPU)."""
    fields = ("power_w", "sm_active", "temp_c", "sm_clock_mhz")
    p = write(tmp_path / "wide.csv", wide_csv(CSV_MAX_GPUS, fields, rows=20))
    t0 = time.monotonic()
    rec = load_recording(p)
    elapsed = time.monotonic() - t0
    assert len(rec.gpus) == CSV_MAX_GPUS and rec.meta["layout"] == "wide"
    assert len(rec.series[CSV_MAX_GPUS - 1].values) == len(fields)
    assert elapsed < 5, f"took {elapsed:.1f} s"


def test_wide_csv_beyond_the_gpu_bound_is_refused(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "wide.csv", wide_csv(CSV_MAX_GPUS + 1, ("power_w",), rows=1))
    refused(capsys, ["analyze", str(p)], f"{p}:1", f"names {CSV_MAX_GPUS + 1} GPUs",
            f"at most {CSV_MAX_GPUS}")  # fmt: skip


def test_wide_csv_of_200k_gpus_is_refused_at_once(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "wide.csv", wide_csv(200_000, ("power_w",), rows=1))
    t0 = time.monotonic()
    refused(capsys, ["analyze", str(p)], f"{p}:1", f"more than {CSV_MAX_COLUMNS}")
    assert time.monotonic() - t0 < 5


def test_header_of_two_million_cells_is_refused_before_splitting(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "cols.csv", "time,power_w," + ",".join(["x"] * 2_200_000) + "\n0,1,\n")
    t0 = time.monotonic()
    refused(capsys, ["analyze", "--format", "csv", str(p)], f"{p}:1",
            f"more than {CSV_MAX_COLUMNS} comma-separated fields")  # fmt: skip
    assert time.monotonic() - t0 < 5


def test_wide_header_naming_a_huge_gpu_index(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "wide.csv", f"time,gpu{'9' * 5000}_power_w\n0,100\n")
    refused(capsys, ["analyze", str(p)], f"{p}:1", "GPU index 999999999999...(5000 digits)",
            f"above {MAX_GPU_INDEX}")  # fmt: skip


# -- GPU indices --------------------------------------------------------------------------


@pytest.mark.parametrize("index", ["12345678901234567890", "9" * 5000, str(MAX_GPU_INDEX + 1)])
def test_long_csv_gpu_index_beyond_the_bound(tmp_path: Path, capsys, index: str) -> None:
    p = write(tmp_path / "long.csv", f"time,gpu,power_w\n0,{index},100\n1,{index},100\n")
    refused(capsys, ["analyze", str(p)], f"{p}:2", "field 'gpu'", "GPU index",
            f"above {MAX_GPU_INDEX}")  # fmt: skip


def test_long_csv_at_the_largest_gpu_index_is_read(tmp_path: Path) -> None:
    p = write(tmp_path / "long.csv", f"time,gpu,power_w\n0,{MAX_GPU_INDEX},100\n")
    assert [g.index for g in load_recording(p).gpus] == [MAX_GPU_INDEX]


def test_long_csv_with_more_gpus_than_the_bound(tmp_path: Path, capsys) -> None:
    rows = "".join(f"0,{g},100\n" for g in range(CSV_MAX_GPUS + 1))
    p = write(tmp_path / "long.csv", "time,gpu,power_w\n" + rows)
    refused(capsys, ["analyze", str(p)], str(p), f"names {CSV_MAX_GPUS + 1} GPUs",
            f"at most {CSV_MAX_GPUS}")  # fmt: skip


@pytest.mark.parametrize("index", ["12345678901234567890", "9" * 5000])
def test_nvidia_smi_index_beyond_the_bound(tmp_path: Path, capsys, index: str) -> None:
    """20 digits passed the reader and failed in the rule engine ("ValueError: overflow")."""
    body = "".join(f"2024/01/01 00:00:0{t}.000, {index}, 100 W, 5 %\n" for t in range(3))
    p = write(tmp_path / "smi.csv", SMI_HEADER + body)
    refused(capsys, ["analyze", str(p)], f"{p}:2", "field 'index'", f"above {MAX_GPU_INDEX}")


@pytest.mark.parametrize("entity", ["12345678901234567890", "9" * 5000])
def test_dcgmi_entity_beyond_the_bound(tmp_path: Path, capsys, entity: str) -> None:
    head = (FIXTURES / "importers" / "dcgmi_dmon_pp4.txt").read_text().splitlines()[:4]
    row = head[3].replace("GPU 0 ", f"GPU {entity} ", 1)
    p = write(tmp_path / "d.txt", "\n".join([*head[:3], row]) + "\n")
    refused(capsys, ["analyze", str(p)], f"{p}:4", f"above {MAX_GPU_INDEX}")


def test_bitmask_of_400_digits_is_not_a_bitmask(tmp_path: Path, capsys) -> None:
    """float(int('9' * 400)) was an OverflowError out of the nvidia-smi reader."""
    p = write(tmp_path / "smi.csv", "timestamp, index, power.draw [W], "
              "clocks_event_reasons.active\n"
              f"2024/01/01 00:00:00.000, 0, 100 W, 0x{'f' * 400}\n")  # fmt: skip
    refused(capsys, ["analyze", str(p)], f"{p}:2", "must be a bitmask")


def test_kineto_device_beyond_the_documented_rank_bound(tmp_path: Path, capsys) -> None:
    ev = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 7}
    ev["args"] = {"device": 2**40}
    p = write(tmp_path / "rank0.trace.json", KINETO_HEAD + json.dumps(ev).encode() + b"]}")
    refused(capsys, ["analyze", "--format", "kineto", str(p)], str(p),
            f"device index {2**40} is above {KINETO_MAX_RANK}")  # fmt: skip


# -- byte order marks ----------------------------------------------------------------------


def test_csv_with_a_utf8_bom_finds_its_time_column(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a BOM: the first header was '\\ufefftime'."""
    rows = "".join(f"{t},{100 + t}\n" for t in range(5))
    p = write(tmp_path / "bom.csv", b"\xef\xbb\xbf" + f"time,power_w\n{rows}".encode())
    rec = load_recording(p)
    assert rec.meta["time_format"] == "seconds from the start"
    assert rec.series[0].t_s.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_nvidia_smi_csv_with_a_utf8_bom(tmp_path: Path) -> None:
    text = (FIXTURES / "importers" / "nvidia_smi_units.csv").read_bytes()
    plain = load_recording(write(tmp_path / "plain.csv", text))
    rec = load_recording(write(tmp_path / "smi.csv", b"\xef\xbb\xbf" + text))
    assert rec.meta["source"] == plain.meta["source"] == "nvidia-smi"
    assert [g.uuid for g in rec.gpus] == [g.uuid for g in plain.gpus]
    assert rec.series[0].t_s.tolist() == plain.series[0].t_s.tolist()


# -- traces and topologies ------------------------------------------------------------------


def trace_text(header_gpus: list[int], sample_gpu: int, topology: object = None) -> str:
    head: dict[str, object] = {"bubblewatch_trace": 1, "gpus": [{"index": g} for g in header_gpus]}
    if topology is not None:
        head["topology"] = topology
    rows = [json.dumps({"type": "sample", "t": float(t), "gpu": sample_gpu, "power_avg_w": 300.0,
                        "sm_active_ratio": 0.5}) for t in range(20)]  # fmt: skip
    return json.dumps(head) + "\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize(
    ("gpus", "where"),
    [(([10**25], 10**25), (1, "gpus[0].index")), (([0], 10**25), (2, "gpu")),
     (([0], MAX_GPU_INDEX + 1), (2, "gpu"))],
    ids=["header", "sample-25-digits", "sample-bound-plus-one"],
)  # fmt: skip
def test_trace_gpu_index_beyond_the_bound(
    tmp_path: Path, capsys, gpus: tuple[list[int], int], where: tuple[int, str]
) -> None:
    """A trace GPU index of 10**25 passed the reader and failed in the rules (ValueError)."""
    (header, sample), (line, field) = gpus, where
    p = write(tmp_path / "t.jsonl", trace_text(header, sample))
    refused(capsys, ["analyze", str(p)], f"{p}:{line}: field '{field}'",
            f"GPU index {sample} is above {MAX_GPU_INDEX}")  # fmt: skip


def test_trace_at_the_largest_gpu_index_is_analysed(tmp_path: Path) -> None:
    p = write(tmp_path / "t.jsonl", trace_text([MAX_GPU_INDEX], MAX_GPU_INDEX))
    assert list(load_recording(p).series) == [MAX_GPU_INDEX]


@pytest.mark.parametrize(
    ("topology", "expect"),
    [({"stages": [[0], [10**25]]}, "(0..1048575)"),
     ({"pp_size": 2, "base_gpu_id": 10**25}, "GPU indices go up to 1048575")],
    ids=["stages", "base-gpu-id"],
)  # fmt: skip
def test_topology_gpu_index_beyond_the_bound(
    tmp_path: Path, capsys, topology: object, expect: str
) -> None:
    p = write(tmp_path / "t.jsonl", trace_text([0], 0, topology))
    refused(capsys, ["analyze", str(p)], f"{p}:1", expect)


def test_nvidia_smi_with_more_gpus_than_the_bound(tmp_path: Path, capsys) -> None:
    """20000 GPUs in an nvidia-smi capture took 5 s (a scan of every row per GPU), unbounded."""
    rows = "".join(f"2024/01/01 00:00:00.000, {g}, 100 W, 5 %\n" for g in range(CSV_MAX_GPUS + 1))
    p = write(tmp_path / "smi.csv", SMI_HEADER + rows)
    refused(capsys, ["analyze", str(p)], str(p), f"more than {CSV_MAX_GPUS} GPUs in one file")


def test_dcgmi_with_more_gpus_than_the_bound(tmp_path: Path, capsys) -> None:
    head = (FIXTURES / "importers" / "dcgmi_dmon_pp4.txt").read_text().splitlines()[:4]
    rows = [head[3].replace("GPU 0 ", f"GPU {g} ", 1) for g in range(CSV_MAX_GPUS + 1)]
    p = write(tmp_path / "d.txt", "\n".join([*head[:3], *rows]) + "\n")
    refused(capsys, ["analyze", str(p)], str(p), f"more than {CSV_MAX_GPUS} GPUs in one file")


def test_nvidia_smi_at_the_gpu_bound_reads_quickly(tmp_path: Path) -> None:
    rows = "".join(f"2024/01/01 00:00:{t:02d}.000, {g}, 100 W, 5 %\n"
                   for t in range(20) for g in range(CSV_MAX_GPUS))  # fmt: skip
    p = write(tmp_path / "smi.csv", SMI_HEADER + rows)
    t0 = time.monotonic()
    rec = load_recording(p)
    assert len(rec.gpus) == CSV_MAX_GPUS and len(rec.series[0]) == 20
    assert time.monotonic() - t0 < 5


# -- digits in labels and command lines ----------------------------------------------------


def test_decimal_reads_only_ascii_digits_within_the_bound() -> None:
    got = [decimal(x, MAX_GPU_INDEX) for x in ["0", "007", str(MAX_GPU_INDEX),
                                                str(MAX_GPU_INDEX + 1), "\u00b2", "9" * 5000,
                                                "-1", "", "\u0663"]]  # fmt: skip
    assert got == [0, 7, MAX_GPU_INDEX, None, None, None, None, None, None]


def test_fleet_labels_with_odd_digits_are_skipped() -> None:
    """A `gpu` or `stage` label of '²' or 5000 digits made int() raise out of `fleet`."""
    info = [{"pipeline": "p", "stage": "0", "gpu": "0", "host": "a"},
            {"pipeline": "p", "stage": "\u00b2", "gpu": "1", "host": "a"},
            {"pipeline": "p", "stage": "1", "gpu": "9" * 5000, "host": "a"}]  # fmt: skip
    engine = [{"pipeline": "p", "pp_size": "9" * 5000}]
    pipes = pipelines_from_info(info, engine)
    assert [(g.host, g.gpu, g.stage) for g in pipes["p"].gpus] == [("a", 0, 0)]


@pytest.mark.parametrize(
    ("argv", "rc"),
    [("vllm serve m -O " + "9" * 5000, 2), ("vllm serve m --optimization-level \u00b2", 0),
     ("vllm serve m --optimization-level " + "9" * 5000, 0)],
    ids=["O-5000-digits", "opt-level-superscript", "opt-level-5000-digits"],
)  # fmt: skip
def test_engine_command_line_with_odd_digits(tmp_path: Path, capsys, argv: str, rc: int) -> None:
    """`-O` of 5000 digits and `--optimization-level ²` raised ValueError out of analyze.

    `-O` takes a level or JSON, so 5000 digits are an error naming the flag; an
    `--optimization-level` that is no level is kept as a flag, not read as one.
    """
    p = write(tmp_path / "t.jsonl", trace_text([0], 0))
    assert main(["analyze", str(p), "--engine-cmdline", argv]) == rc
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if rc == 2:
        assert err.startswith("bubblewatch: error: --engine-cmdline: field '-O'"), err
        assert "expects JSON (or -O0..-O3)" in err and "a number too long" in err
