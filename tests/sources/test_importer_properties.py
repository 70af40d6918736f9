"""Property tests over every recorded-input reader: any bytes get a Recording or an InputError.

Random bytes, byte order marks, other encodings, gzip, huge and odd numbers
(5000 digits, 1e308, Unicode digits, hex past 64 bits) and GPU indices, in
the CSV, nvidia-smi, dcgmi, trace and profiler formats. Nothing else may
escape (issue 22: OverflowError, Python's digit-limit ValueError and
`ValueError: overflow` came out of these readers), and each file is read in
bounded time.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording
from bubblewatch.sources.load import load_recording

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
FORMATS = ("auto", "csv", "nvidia-smi", "dcgmi", "trace", "kineto")
READ_S = 5.0  # per file, on a loaded CI machine; each is a few KB

SETTINGS = settings(
    max_examples=60,
    deadline=None,  # timed below, against READ_S
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Cells that broke or could break a number or index conversion.
ODD_CELLS = [
    "", "0", "1", "-1", "+3", "3.5", "1e308", "1e309", "-1e308", "nan", "inf", "-inf",
    "N/A", "[N/A]", "[Not Supported]", "0x4", "0x" + "f" * 17, "0x" + "f" * 400,
    "9" * 20, "9" * 400, "9" * 5000, "1048575", "1048576", "٣", "²", "\uff11", "1_000",
    "GPU 3", "cuda:3", "GPU-3f2a", "100 W", "45 %", '"a,b"', "\x00", "é", "\ufeff1",
    "2026/11/29 08:14:10.123", "2025-09-24T03:48:33.493Z", "9999/99/99 99:99:99",
]  # fmt: skip
HEADER_CELLS = [
    "time", "timestamp", "gpu", "index", "uuid", "name", "host", "power_w", "power.draw [W]",
    "utilization.gpu [%]", "sm_active", "temp_c", "clocks_event_reasons.active",
    "gpu0_power_w", "gpu1_sm_active", "gpu" + "9" * 30 + "_power_w", "sm_active_3", "phase",
    "\ufefftime", "x",
]  # fmt: skip
ENCODINGS = ("utf-8", "utf-8-sig", "utf-16", "latin-1")


def read(data: bytes, fmt: str, *, name: str = "input") -> Recording | None:
    """Load `data` as a file; a Recording or None (an InputError); any other exception fails."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_bytes(data)
        t0 = time.monotonic()
        try:
            rec = load_recording(p, format=fmt)
        except InputError as e:
            assert str(e).startswith(str(p)) or str(p) in str(e) or e.path, str(e)
            rec = None
        elapsed = time.monotonic() - t0
    assert elapsed < READ_S, f"{fmt}: {elapsed:.1f} s for {len(data)} bytes"
    return rec


def variants(text: str, encoding: str, zipped: bool) -> bytes:
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        data = text.encode("utf-8", errors="replace")
    return gzip.compress(data) if zipped else data


@SETTINGS
@given(data=st.binary(max_size=4096), fmt=st.sampled_from(FORMATS), bom=st.booleans(),
       zipped=st.booleans())  # fmt: skip
def test_random_bytes(data: bytes, fmt: str, bom: bool, zipped: bool) -> None:
    raw = (b"\xef\xbb\xbf" if bom else b"") + data
    read(gzip.compress(raw) if zipped else raw, fmt)


cells = st.sampled_from(ODD_CELLS) | st.text(max_size=12)
SMI_HEADER = ["timestamp", "index", "uuid", "power.draw [W]", "utilization.gpu [%]",
              "clocks_event_reasons.active"]  # fmt: skip


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    """A header with a per-GPU measurement in it, and rows of its width (mostly)."""
    header = draw(st.sampled_from([["time", "gpu", "power_w"], SMI_HEADER, []]))
    header = header + draw(st.lists(st.sampled_from(HEADER_CELLS), max_size=4))
    if not header:
        header = ["power_w"]
    width = st.integers(len(header), len(header)) | st.integers(1, len(header) + 1)
    rows = draw(st.lists(width.flatmap(lambda n: st.lists(cells, min_size=n, max_size=n)),
                         max_size=8))  # fmt: skip
    return header, rows


@SETTINGS
@given(
    table=tables(),
    sep=st.sampled_from([",", ", "]),
    newline=st.sampled_from(["\n", "\r\n"]),
    encoding=st.sampled_from(ENCODINGS),
    zipped=st.booleans(),
    fmt=st.sampled_from(("auto", "csv", "nvidia-smi")),
)
@example(table=(["time", "gpu", "power_w"], [["0", "9" * 20, "1"]]), sep=",", newline="\n",
         encoding="utf-8", zipped=False, fmt="auto")  # fmt: skip
@example(table=(["time", "gpu", "power_w"], [["0", "9" * 5000, "1"]]), sep=",", newline="\n",
         encoding="utf-8", zipped=False, fmt="auto")  # fmt: skip
@example(table=(SMI_HEADER, [["2026/11/29 08:14:10.123", "9" * 20, "GPU-1", "1 W", "5 %", "0x0"]]),
         sep=", ", newline="\n", encoding="utf-8", zipped=False, fmt="auto")  # fmt: skip
@example(table=(SMI_HEADER, [["2026/11/29 08:14:10.123", "0", "GPU-1", "1 W", "5 %",
                              "0x" + "f" * 400]]),
         sep=", ", newline="\n", encoding="utf-8", zipped=False, fmt="auto")  # fmt: skip
def test_csv_tables(
    *,
    table: tuple[list[str], list[list[str]]],
    sep: str,
    newline: str,
    encoding: str,
    zipped: bool,
    fmt: str,
) -> None:
    header, rows = table
    lines = [sep.join(header)] + [sep.join(r) for r in rows]
    read(variants(newline.join(lines) + newline, encoding, zipped), fmt, name="t.csv")


@SETTINGS
@given(
    rows=st.lists(st.tuples(st.sampled_from(["GPU", "Switch", "GPU-I"]), cells,
                            st.lists(cells, min_size=10, max_size=10)), max_size=12),
    encoding=st.sampled_from(ENCODINGS),
)  # fmt: skip
@example(rows=[("GPU", "9" * 20, ["1"] * 10)], encoding="utf-8")
@example(rows=[("GPU", "1", ["9" * 400] * 10)], encoding="utf-8")
def test_dcgmi_dmon(rows: list[tuple[str, str, list[str]]], encoding: str) -> None:
    head = (FIXTURES / "dcgmi_dmon_pp4.txt").read_text().splitlines()[:3]
    body = [f"{kind} {entity} " + " ".join(v or "N/A" for v in values)
            for kind, entity, values in rows]  # fmt: skip
    read(variants("\n".join(head + body) + "\n", encoding, False), "auto", name="d.txt")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from([10**20, 10**400, 2**63, -(2**63) - 1, 1e308, 2**40]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=3),
    max_leaves=8,
)  # fmt: skip
SAMPLE_KEYS = ["type", "t", "gpu", "power_avg_w", "sm_active_ratio", "kernel_busy_ratio",
               "clocks_event_reasons", "running", "kind", "topology", "x_a"]  # fmt: skip


@SETTINGS
@given(
    gpus=st.lists(st.dictionaries(st.sampled_from(["index", "uuid", "name", "power_limit_w"]),
                                  json_values, max_size=4), max_size=3),
    records=st.lists(st.dictionaries(st.sampled_from(SAMPLE_KEYS), json_values, max_size=6),
                     max_size=12),
    types=st.lists(st.sampled_from(["sample", "load", "event", "topology", "summary", "x_a"]),
                   min_size=12, max_size=12),
    zipped=st.booleans(),
)  # fmt: skip
def test_traces(gpus: list[dict[str, object]], records: list[dict[str, object]],
                types: list[str], zipped: bool) -> None:  # fmt: skip
    lines = [json.dumps({"bubblewatch_trace": 1, "gpus": gpus})]
    for rec, kind in zip(records, types, strict=False):
        lines.append(json.dumps({"type": kind, **{k: v for k, v in rec.items() if k != "type"}}))
    text = "\n".join(lines) + "\n"
    read(gzip.compress(text.encode()) if zipped else text.encode(), "auto", name="t.jsonl")


STEP_EVENT = {"ph": "X", "cat": "user_annotation", "ts": 1, "dur": 2, "pid": 0, "tid": 1}
KERNEL_EVENT = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 7}


@SETTINGS
@given(
    events=st.lists(st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "B", "i"]),
         "cat": st.sampled_from(["kernel", "cpu_op", "user_annotation"]),
         "name": st.sampled_from(["k", "ncclKernel_AllReduce", "nccl:send", "ProfilerStep#3",
                                  "ProfilerStep#\u00b2", "ProfilerStep#" + "9" * 5000])},
        optional={"ts": json_values, "dur": json_values, "pid": json_values,
                  "tid": json_values, "args": st.dictionaries(
                      st.sampled_from(["device", "stream", "rank"]), json_values, max_size=2)},
    ), max_size=10),
    meta=st.dictionaries(st.sampled_from(["distributedInfo", "deviceProperties",
                                          "baseTimeNanoseconds"]), json_values, max_size=2),
)  # fmt: skip
@example(events=[STEP_EVENT | {"name": "ProfilerStep#\u00b2"}, KERNEL_EVENT], meta={})
@example(events=[STEP_EVENT | {"name": "ProfilerStep#" + "9" * 5000}, KERNEL_EVENT], meta={})
def test_kineto_traces(events: list[dict[str, object]], meta: dict[str, object]) -> None:
    text = json.dumps({"schemaVersion": 1, **meta, "traceEvents": events})
    read(text.encode(), "kineto", name="rank0.trace.json")
