"""Hostile recorded inputs to `analyze` and `simulate`: a clear error, exit 2, nothing else.

Every file kind the one-shot commands read (traces, nvidia-smi CSV, dcgmi,
profiler traces, topology files, scenario files, rule files) gets nesting,
size, alias bombs, huge numbers and gzip bombs. Pins: a 100k-deep trace
line and a 5000-digit integer gave tracebacks; a 1 GB gzip bomb took 2.2 GB;
a header over 64 KB was "empty file"; a 100k-GPU header ran for minutes;
topology and scenario files nested 300 deep were RecursionErrors and alias
bombs expanded to gigabytes. The bounds are bubblewatch.limits (docs/daemon.md,
"Limits").
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.limits import (
    KINETO_MAX_DEVICES,
    KINETO_MAX_FILE_BYTES,
    KINETO_MAX_FILES,
    MAX_LINE_BYTES,
    TOPOLOGY_MAX_GPUS,
    TRACE_MAX_GPUS,
)

from ._files import TRACE_HEADER, gzip_members, yaml_alias_bomb, yaml_nested

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *expect: str) -> str:
    """Run the CLI in-process: exit 2, one error line naming the bound; no exception escapes."""
    t0 = time.monotonic()
    rc = main(argv)
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("bubblewatch: error: "), err
    for text in expect:
        assert text in err, err
    assert elapsed < 20, f"took {elapsed:.1f} s"
    return err


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# -- traces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "expect"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests deeper than 64 levels"),
        ('{"type":"x_a","v":' + "[" * 70 + "]" * 70 + "}", "nests deeper than 64 levels"),
        ('{"type":"sample","t":1,"gpu":' + "9" * 5000 + "}", "more than 30 digits"),
        ('{"type":"sample","gpu":0,"t":' + "9" * 400 + "}", "more than 30 digits"),
        ('{"type":"sample","gpu":0,"t":1e999}', "finite number"),
    ],
    ids=["nested-100k", "nested-70", "int-5000-digits", "int-400-digits", "float-overflow"],
)
def test_trace_records(tmp_path: Path, capsys, record: str, expect: str) -> None:
    p = write(tmp_path / "t.jsonl", TRACE_HEADER + record + "\n")
    refused(capsys, ["analyze", str(p)], f"{p}:2", expect)


def test_trace_header_of_100k_gpus_is_refused_at_once(tmp_path: Path, capsys) -> None:
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "x"} for i in range(100_000)]
    p = write(tmp_path / "t.jsonl", json.dumps({"bubblewatch_trace": 1, "gpus": gpus}) + "\n")
    # CPU time, not wall: the refusal is this process's own work, and on a loaded machine the
    # wall clock also counts the other processes' (6.3 s with two test workers on 2 cores).
    t0 = time.process_time()
    refused(capsys, ["analyze", str(p)], f"{p}:1", f"at most {TRACE_MAX_GPUS}")
    assert time.process_time() - t0 < 5


def test_trace_header_of_1024_distinct_gpus_reads_in_linear_time(tmp_path: Path) -> None:
    """The duplicate-index check was quadratic; at the bound it must stay quick."""
    from bubblewatch.sources.trace import read_trace

    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "x"} for i in range(TRACE_MAX_GPUS)]
    p = write(tmp_path / "t.jsonl", json.dumps({"bubblewatch_trace": 1, "gpus": gpus}) + "\n")
    assert len(read_trace(p).gpus) == TRACE_MAX_GPUS


def test_trace_header_longer_than_the_format_sniffer_reads(tmp_path: Path, capsys) -> None:
    """A header over 64 KB was sniffed as an empty file; it is a trace like any other."""
    header = json.loads(TRACE_HEADER)
    header["meta"] = {"notes": "x" * 100_000}
    p = write(tmp_path / "t.jsonl", json.dumps(header) + "\n")
    assert main(["analyze", "--json", str(p)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "insufficient_data"


def test_trace_line_over_the_bound(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "t.jsonl", TRACE_HEADER + '{"type":"x_pad","v":"' + "x" * MAX_LINE_BYTES)
    refused(capsys, ["analyze", str(p)], f"{p}:2", "line is longer than")


def test_text_that_is_not_utf8_or_has_nul(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "t.jsonl", TRACE_HEADER.encode() + b'{"type":"x_\xff"}\n')
    refused(capsys, ["analyze", str(p)], str(p), "decode")
    p = write(tmp_path / "n.jsonl", TRACE_HEADER + '{"type":"x_a"}\0\n')
    refused(capsys, ["analyze", str(p)], f"{p}:2")


def _bounded_run(argv: list[str], limit_bytes: int = 1 << 30) -> subprocess.CompletedProcess[str]:
    """The CLI in a child whose address space is capped (a bomb would hit MemoryError)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bubblewatch", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("block", "expect"),
    [
        (b" " * 4096, "inflates more than"),  # one endless line (caught before its end)
        (b'{"type":"event","t":1.0,"kind":"x"}\n', "inflates more than"),  # endless records
        (b'{"type":"x_pad"}\n', "inflates more than"),  # records the reader skips
    ],
    ids=["one-line", "events", "skipped-records"],
)
def test_gzip_bomb_of_1gib_in_bounded_memory(tmp_path: Path, block: bytes, expect: str) -> None:
    p = gzip_members(tmp_path / "bomb.jsonl.gz", TRACE_HEADER.encode(), block, 1 << 30)
    assert p.stat().st_size < 8 << 20
    t0 = time.monotonic()
    done = _bounded_run(["analyze", str(p)])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and expect in done.stderr
    assert time.monotonic() - t0 < 60


# -- nvidia-smi, dcgmi ----------------------------------------------------------------

SMI_HEADER = "timestamp, index, power.draw [W], utilization.gpu [%]\n"


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        ("2024/01/01 00:00:00.000, " + "9" * 5000 + ", 100 W, 5 %\n", "GPU index"),
        ("2024/01/01 00:00:00.000, 0, " + "9" * 400 + " W, 5 %\n", "finite"),
        ("2024/01/01 00:00:00.000, 0, 1e999 W, 5 %\n", "finite"),
        ("2024/01/01 00:00:00.000, 0, " + "1" * (MAX_LINE_BYTES + 10) + "\n", "longer than"),
    ],
    ids=["index-5000-digits", "value-400-digits", "inf", "long-line"],
)
def test_nvidia_smi_csv(tmp_path: Path, capsys, body: str, expect: str) -> None:
    p = write(tmp_path / "smi.csv", SMI_HEADER + body)
    refused(capsys, ["analyze", str(p)], f"{p}:2", expect)


def test_nvidia_smi_gzip_bomb(tmp_path: Path) -> None:
    row = b"2024/01/01 00:00:00.000, 0, 100 W, 5 %\n"
    p = gzip_members(tmp_path / "smi.csv.gz", SMI_HEADER.encode(), row, 1 << 30)
    done = _bounded_run(["analyze", str(p)])
    assert done.returncode == 2 and "inflates more than" in done.stderr, done.stderr


def test_dcgmi_long_line(tmp_path: Path, capsys) -> None:
    head = (FIXTURES / "importers" / "dcgmi_dmon_pp4.txt").read_text().splitlines()[:3]
    p = write(tmp_path / "d.txt", "\n".join(head) + "\nGPU 0 " + "1" * (MAX_LINE_BYTES + 1))
    refused(capsys, ["analyze", str(p)], str(p), "longer than")


# -- profiler (Kineto) traces -----------------------------------------------------------

KINETO_HEAD = b'{"schemaVersion": 1, "traceEvents": ['


@pytest.mark.parametrize(
    ("events", "expect"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests"),
        (b'{"ph":"X","name":"k","args":{"a":' + b"[" * 70 + b"]" * 70 + b"}}", "nests deeper"),
        (b'{"ph":"X","ts":' + b"9" * 5000 + b',"dur":1,"pid":0,"tid":0,"name":"k"}', "30 digits"),
    ],
    ids=["nested-100k", "nested-70", "int-5000-digits"],
)
def test_kineto_events(tmp_path: Path, capsys, events: bytes, expect: str) -> None:
    p = write(tmp_path / "rank0.trace.json", KINETO_HEAD + events + b"]}")
    refused(capsys, ["analyze", "--format", "kineto", str(p)], str(p), expect)


def test_kineto_gzip_bomb(tmp_path: Path) -> None:
    p = gzip_members(tmp_path / "r.trace.json.gz", KINETO_HEAD, b"{},", 1 << 30)
    done = _bounded_run(["analyze", "--format", "kineto", str(p)])
    assert done.returncode == 2 and "inflates more than" in done.stderr, done.stderr


def kineto_event(pid: int = 0, ts: int = 1) -> bytes:
    return b'{"ph":"X","cat":"kernel","name":"k","ts":%d,"dur":2,"pid":%d,"tid":7}' % (ts, pid)


def test_kineto_too_many_files_refused_before_reading_any(tmp_path: Path, capsys) -> None:
    for rank in range(KINETO_MAX_FILES + 1):
        write(tmp_path / f"rank{rank}.trace.json", b"not JSON: never read")
    html = tmp_path / "r.html"
    refused(capsys, ["analyze", "--format", "kineto", str(tmp_path), "--html", str(html)],
            str(tmp_path), f"{KINETO_MAX_FILES + 1} profiler trace files",
            f"at most {KINETO_MAX_FILES}")  # fmt: skip
    assert not html.exists()


def test_kineto_file_larger_than_the_bound_refused_at_once(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "rank0.trace.json", KINETO_HEAD + kineto_event())
    os.truncate(p, KINETO_MAX_FILE_BYTES + 1)  # sparse: nothing is written or read
    refused(capsys, ["analyze", "--format", "kineto", str(p)], str(p),
            f"larger than {KINETO_MAX_FILE_BYTES} bytes")  # fmt: skip


def test_kineto_text_beyond_the_bound_once_gzip_is_undone(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small gzip file can hold more text than the bound; it is counted as it inflates."""
    from bubblewatch.sources.kineto import reader

    monkeypatch.setattr(reader, "KINETO_MAX_FILE_BYTES", 1 << 20)
    events = b",".join(kineto_event(ts=10 * i) for i in range(40_000))  # ~2.5 MB of text
    p = write(tmp_path / "rank0.trace.json.gz", gzip.compress(KINETO_HEAD + events + b"]}"))
    assert p.stat().st_size < 1 << 20
    html = tmp_path / "r.html"
    refused(capsys, ["analyze", "--format", "kineto", str(p), "--html", str(html)], str(p),
            f"more than {1 << 20} bytes of JSON")  # fmt: skip
    assert not html.exists()


def test_kineto_devices_in_one_file(tmp_path: Path, capsys) -> None:
    events = b",".join(kineto_event(pid=d) for d in range(KINETO_MAX_DEVICES + 1))
    p = write(tmp_path / "rank0.trace.json", KINETO_HEAD + events + b"]}")
    refused(capsys, ["analyze", "--format", "kineto", str(p)], f"{p}:",
            f"more than {KINETO_MAX_DEVICES} devices")  # fmt: skip


@pytest.mark.parametrize(
    ("header", "extra", "expect"),
    [
        (b'"distributedInfo":{"rank":100000000000000,"world_size":2},', ["--tp-size", "2"],
         "rank 100000000000000 is above"),  # laid out a pipeline up to that rank: no end
        (b"", ["--pp-size", "1000000000"], f"more than {TOPOLOGY_MAX_GPUS} GPUs"),
    ],
    ids=["rank", "pp-size"],
)  # fmt: skip
def test_kineto_pipeline_sizes(
    tmp_path: Path, capsys, header: bytes, extra: list[str], expect: str
) -> None:
    p = write(
        tmp_path / "rank0.trace.json", b"{" + header + KINETO_HEAD[1:] + kineto_event() + b"]}"
    )
    refused(capsys, ["analyze", "--format", "kineto", *extra, str(p)], expect)


# -- topology, scenario and rule files (YAML) ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (yaml_nested("pipelines"), "nests deeper than 64 levels"),
        (yaml_alias_bomb("x"), "more than 50000 values"),
        ("a: &a [*a]\n", "refers to itself"),
        ("version: " + "1" * 5000 + "\n", "more than 30 digits"),
        ("version: 1\n# " + "x" * (1 << 20) + "\n", "larger than 1048576 bytes"),
        ("version: 1\nid: \0\n", "not valid YAML"),
    ],
    ids=["nested", "alias-bomb", "self-alias", "int-5000-digits", "over-1MiB", "nul"],
)
def test_topology_file(tmp_path: Path, capsys, text: str, expect: str) -> None:
    trace = write(tmp_path / "t.jsonl", TRACE_HEADER)
    topo = write(tmp_path / "topo.yaml", text)
    refused(capsys, ["analyze", "--topology", str(topo), str(trace)], str(topo), expect)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (yaml_nested("name"), "nests deeper than 64 levels"),
        (yaml_alias_bomb("faults"), "more than 50000 values"),
        ("name: x\nseed: " + "1" * 5000 + "\n", "more than 30 digits"),
        (b"name: \xff\xfe\n", "not UTF-8"),
    ],
    ids=["nested", "alias-bomb", "int-5000-digits", "not-utf8"],
)
def test_scenario_file(tmp_path: Path, capsys, text: str | bytes, expect: str) -> None:
    sc = write(tmp_path / "bad.yaml", text)
    out = tmp_path / "out.jsonl"
    refused(capsys, ["simulate", str(sc), "-o", str(out)], str(sc), expect)
    assert not out.exists()


def test_scenario_override_value_nested(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.jsonl"
    argv = ["simulate", "pp2-async", "-o", str(out), "--set", "name=" + "[" * 500 + "]" * 500]
    refused(capsys, argv, "nests deeper")
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (yaml_nested("groups"), "nests deeper than 64 levels"),
        ("version: " + "1" * 5000 + "\n", "more than 30 digits"),
    ],
    ids=["nested", "int-5000-digits"],
)
def test_rule_file(tmp_path: Path, capsys, text: str, expect: str) -> None:
    rules = write(tmp_path / "bad.rules.yaml", text)
    rc = main(["rules", "check", str(rules)])
    err = capsys.readouterr().err
    assert rc == 2 and str(rules) in err and expect in err, err


# -- outputs: nothing written, or all of it --------------------------------------------


def test_report_into_a_missing_directory_leaves_no_file(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.jsonl"
    assert main(["simulate", "pp2-async", "--duration", "12", "-o", str(trace)]) == 0
    capsys.readouterr()
    html, png = tmp_path / "r.html", tmp_path / "missing" / "r.png"
    refused(capsys, ["analyze", str(trace), "--html", str(html), "--png", str(png)], str(png))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no r.html, no temp
    refused(capsys, ["analyze", str(trace), "--html", str(tmp_path / "no" / "r.html")], "no")


def test_simulate_into_a_missing_directory_leaves_no_file(tmp_path: Path, capsys) -> None:
    out, timeline = tmp_path / "t.jsonl.gz", tmp_path / "missing" / "t.bwtl"
    argv = ["simulate", "pp2-async", "--duration", "5", "-o", str(out), "--timeline", str(timeline)]
    refused(capsys, argv, str(timeline), "no such directory")
    refused(capsys, ["simulate", "pp2-async", "-o", str(tmp_path / "no" / "t.jsonl")], "no such")
    assert list(tmp_path.iterdir()) == []


def test_outputs_interrupted_midway_leave_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A failure while writing the second file (a full disk) removes the first one too."""
    from bubblewatch.sinks import html_report

    trace = tmp_path / "t.jsonl"
    assert main(["simulate", "pp2-async", "--duration", "12", "-o", str(trace)]) == 0

    def no_space(path: str, *args: object, **kwargs: object) -> None:
        Path(path).write_bytes(b"\x89PNG partial")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(html_report, "write_png_report", no_space)
    html, png = tmp_path / "r.html", tmp_path / "r.png"
    capsys.readouterr()
    refused(capsys, ["analyze", str(trace), "--html", str(html), "--png", str(png)],
            f"{png}: cannot write: No space left on device")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("trace", "t.jsonl"),
        ("nvidia-smi", "smi.csv"),
        ("dcgmi", "d.txt"),
        ("kineto", "r.trace.json"),
        ("topology", "topo.yaml"),
        ("scenario", "sc.yaml"),
        ("rules", "x.rules.yaml"),
        ("rule-test", "x.test.yaml"),
    ],
)
def test_endless_file_is_refused_without_reading_it_all(
    tmp_path: Path, capsys, kind: str, name: str
) -> None:
    """/dev/zero behind each kind of input: a bounded read, an error, no hang."""
    endless = tmp_path / name
    endless.symlink_to("/dev/zero")
    trace = write(tmp_path / "ok.jsonl", TRACE_HEADER)
    argv = {
        "topology": ["analyze", "--topology", str(endless), str(trace)],
        "scenario": ["simulate", str(endless), "-o", str(tmp_path / "out.jsonl")],
        "rules": ["rules", "check", str(endless)],
        "rule-test": ["rules", "test", str(endless)],
    }.get(kind, ["analyze", "--format", kind, str(endless)])
    t0 = time.monotonic()
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert name in captured.err + captured.out
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        (["--duration", "1e9"], "timeline cells"),  # tried to allocate 2.9 TiB
        (["--interval", "1e-9", "--duration", "10"], "samples; at most"),
        (["--set", "parallel.pp_size=64", "--set", "model.layers=64", "--set",
          "parallel.tp_size=64"], "4096 GPUs; at most 1024"),
        (["--set", "workload.concurrency=100000000"], "at most 100000"),  # ran for minutes
    ],
    ids=["duration", "interval", "gpus", "concurrency"],
)  # fmt: skip
def test_simulation_sizes(tmp_path: Path, capsys, extra: list[str], expect: str) -> None:
    out = tmp_path / "out.jsonl"
    refused(capsys, ["simulate", "pp2-async", "-o", str(out), *extra], expect)
    assert not out.exists()
