"""The trace format: round trips, gzip, truncation, and a precise error for every bad input."""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recording_rows import load_samples

from bubblewatch.model import (
    METRICS,
    Event,
    GpuInfo,
    LoadSample,
    Metric,
    Recording,
    RecordingBuilder,
    Sample,
    Topology,
)
from bubblewatch.sources.trace import TraceReader, TraceWriter, read_trace, write_trace
from bubblewatch.sources.trace.format import TraceError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "small-trace.jsonl"
DOC = ROOT / "docs" / "trace-format.md"
T0 = 1_795_940_050.0


def _recording(n_ticks: int = 50, gpus: int = 4) -> Recording:
    b = RecordingBuilder()
    for g in range(gpus):
        b.add_gpu(GpuInfo(index=g, uuid=f"GPU-{g:04d}", name="NVIDIA H100", power_limit_w=700.0))
    b.topology = Topology.from_sizes(gpus // 2, 2, engine="sglang", source="argv")
    b.meta.update({"host": "node-1", "interval_s": 0.1})
    for k in range(n_ticks):
        t = T0 + 0.1 * k
        for g in range(gpus):
            vals = {
                Metric.POWER_AVG_W: round(150.0 + g + 0.5 * k, 3),
                Metric.SM_ACTIVE_RATIO: round(((k + g) % 4) / 4, 3),
                Metric.CLOCKS_EVENT_REASONS: float(4 if g == 1 else 0),
            }
            if k % 3:  # instant power missing at some instants
                vals[Metric.POWER_INSTANT_W] = round(160.0 + g, 2)
            b.add(Sample(t, g, vals))
        b.add_load(LoadSample(t, float(k % 8), None if k % 5 == 0 else 3.0))
    b.add_event(Event(T0 + 1.0, "xid", 2, {"xid": 79}))
    return b.build()


def _assert_same(a: Recording, b: Recording) -> None:
    assert a.gpus == b.gpus
    assert a.topology == b.topology
    assert set(a.series) == set(b.series)
    for g, sa in a.series.items():
        sb = b.series[g]
        np.testing.assert_array_equal(sa.t_s, sb.t_s)
        assert set(sa.values) == set(sb.values)
        for m, v in sa.values.items():
            np.testing.assert_array_equal(v, sb.values[m], err_msg=f"gpu {g} {m.value}")
    np.testing.assert_array_equal(a.load.t_s, b.load.t_s)
    np.testing.assert_array_equal(a.load.running, b.load.running)
    np.testing.assert_array_equal(a.load.queued, b.load.queued)
    assert a.events == b.events


# -- round trips ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["run.jsonl", "run.jsonl.gz"])
def test_round_trip_plain_and_gzip(tmp_path: Path, name: str) -> None:
    rec = _recording()
    path = tmp_path / name
    write_trace(path, rec)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    back = read_trace(path)
    _assert_same(rec, back)
    assert back.meta == {"host": "node-1", "interval_s": 0.1}
    # NaN (missing instant) survives as NaN, not zero
    assert np.isnan(back.series[0].values[Metric.POWER_INSTANT_W][0])


@pytest.mark.parametrize("every", [1, 3])
def test_per_micro_batch_load_round_trips(tmp_path: Path, every: int) -> None:
    """`micro_batch` (a gauge counting one micro-batch) survives writing and both readers.

    Every reading carrying it takes the columnar reader; some readings without it
    (every=3) take the record one.
    """
    b = RecordingBuilder()
    b.add_gpu(GpuInfo(index=0))
    for k in range(20):
        b.add(Sample(T0 + k, 0, {Metric.POWER_AVG_W: 100.0}))
        mb = float(k % 4) if k % every == 0 else None
        b.add_load(LoadSample(T0 + k, 8.0 if mb is None else mb, 0.0, mb))
    rec = b.build()
    assert rec.load.micro_batch is not None
    path = tmp_path / "t.jsonl"
    write_trace(path, rec)
    records = [json.loads(x) for x in path.read_text().splitlines() if '"type":"load"' in x]
    assert sum("micro_batch" in r for r in records) == len(range(0, 20, every))
    with TraceWriter(tmp_path / "by-record.jsonl", gpus=rec.gpus, meta=rec.meta) as w:
        for s in rec.samples():
            w.sample(s)
        for load in load_samples(rec):
            w.load(load)
    back = read_trace(path)
    for got in (back, read_trace(tmp_path / "by-record.jsonl")):
        assert got.load.micro_batch is not None
        np.testing.assert_array_equal(got.load.micro_batch, rec.load.micro_batch)
        np.testing.assert_array_equal(got.load.running, rec.load.running)
    window = back.window(T0 + 4, T0 + 8)
    assert window.load.micro_batch is not None and len(window.load.micro_batch) == 4
    first = [x.micro_batch for x in load_samples(back)][:3]
    assert first == ([0.0, 1.0, 2.0] if every == 1 else [0.0, None, None])


def test_gzip_is_recognised_by_magic_not_name(tmp_path: Path) -> None:
    rec = _recording(5)
    gz = tmp_path / "run.jsonl.gz"
    write_trace(gz, rec)
    renamed = tmp_path / "run.jsonl"
    renamed.write_bytes(gz.read_bytes())
    _assert_same(rec, read_trace(renamed))


def test_bitmask_is_written_as_integer(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, _recording(2))
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    masks = [r["clocks_event_reasons"] for r in lines if r["type"] == "sample"]
    assert masks and all(type(m) is int for m in masks)
    assert 4 in masks


def test_topology_change_round_trips_as_a_topology_record(tmp_path: Path) -> None:
    first = read_trace(EXAMPLE)
    path = tmp_path / "again.jsonl"
    write_trace(path, first)
    kinds = [json.loads(x).get("type") for x in path.read_text().splitlines()[1:]]
    assert kinds.count("topology") == 1 and "event" in kinds
    second = read_trace(path)
    assert second.events == first.events
    assert second.topology == first.topology


def test_writer_turns_nan_load_into_null(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, gpus=[GpuInfo(0)]) as w:
        w.load(LoadSample(T0, math.nan, 2.0))
    rec = json.loads(path.read_text().splitlines()[1])
    assert rec == {"type": "load", "t": T0, "running": None, "queued": 2.0}


def test_reader_can_be_read_twice(tmp_path: Path) -> None:
    """Regression: a second read() used to treat the header line as a record."""
    path = tmp_path / "t.jsonl"
    write_trace(path, _recording(3))
    reader = TraceReader(path)
    _assert_same(reader.read(), reader.read())
    assert len(reader.gpus) == 4


def test_header_only_trace_keeps_gpus_and_topology(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, gpus=[GpuInfo(0), GpuInfo(1)], topology=Topology(((0,), (1,)))):
        pass
    rec = read_trace(path)
    assert rec.gpu_indices == (0, 1)
    assert rec.topology is not None and rec.topology.stages == ((0,), (1,))
    assert rec.n_samples == 0


def test_topology_record_before_any_sample_is_kept(tmp_path: Path) -> None:
    """Regression: the header topology used to override an early topology record."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, gpus=[GpuInfo(0), GpuInfo(1)], topology=Topology(((0,), (1,)))) as w:
        w.topology(T0, Topology(((1,), (0,))))
        w.event(Event(T0 + 0.5, "note"))
        w.sample(Sample(T0 + 1, 0, {Metric.POWER_AVG_W: 100.0}))
    rec = read_trace(path)
    assert rec.topology is not None and rec.topology.stages == ((1,), (0,))


# -- the documented example ----------------------------------------------------


def test_example_in_docs_reads_and_matches_the_doc() -> None:
    rec = read_trace(EXAMPLE)
    assert rec.gpu_indices == (0, 1)
    assert rec.n_samples == 6
    s0 = rec.series[0]
    # absent and null both mean "not reported": NaN at that instant, not zero
    assert np.isnan(s0.values[Metric.SM_OCCUPANCY_RATIO][1])
    assert np.isnan(s0.values[Metric.TENSOR_ACTIVE_RATIO][1])
    assert rec.series[1].values[Metric.CLOCKS_EVENT_REASONS][1] == 4
    assert [e.kind for e in rec.events] == ["xid", "topology_change"]
    assert rec.topology is not None and rec.topology.stages == ((1,), (0,))
    assert rec.meta["host"] == "gpu-node-07" and rec.meta["samples"] == 6
    np.testing.assert_array_equal(rec.load.queued, [7.0, 0.0])
    block = re.search(r"```jsonl\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None, "docs/trace-format.md lost its example block"
    assert block.group(1) == EXAMPLE.read_text()


def test_doc_lists_every_metric_key() -> None:
    doc = DOC.read_text()
    for m in Metric:
        assert f"| `{m.value}` | {METRICS[m].unit} |" in doc, m.value


# -- truncation ----------------------------------------------------------------


def _write_many(path: Path, n: int) -> list[str]:
    with TraceWriter(path, gpus=[GpuInfo(0)]) as w:
        for k in range(n):
            w.sample(Sample(T0 + k, 0, {Metric.POWER_AVG_W: 100.0 + k}))
    return path.read_text().splitlines(keepends=True) if not str(path).endswith(".gz") else []


def test_truncated_plain_file_keeps_every_complete_record(tmp_path: Path) -> None:
    full = tmp_path / "full.jsonl"
    lines = _write_many(full, 20)
    data = full.read_bytes()
    # cut inside every one of the last three lines, and right after a newline
    ends = np.cumsum([len(x.encode()) for x in lines])
    for cut in (int(ends[-1]) - 5, int(ends[-2]) + 3, int(ends[-3]) + 1, int(ends[-3])):
        part = tmp_path / f"cut{cut}.jsonl"
        part.write_bytes(data[:cut])
        rec = read_trace(part)
        complete = int(np.searchsorted(ends, cut, side="right")) - 1  # minus the header
        assert rec.n_samples == complete, cut
        assert rec.meta.get("truncated", False) == (cut not in ends)


def test_truncated_gzip_file_keeps_every_flushed_record(tmp_path: Path) -> None:
    full = tmp_path / "full.jsonl.gz"
    sizes = []  # compressed size once record k is flushed (the daemon killed right after)
    with TraceWriter(full, gpus=[GpuInfo(0)]) as w:
        for k in range(60):
            w.sample(Sample(T0 + k, 0, {Metric.POWER_AVG_W: 100.0 + k}))
            sizes.append(full.stat().st_size)
    data = full.read_bytes()
    for k in range(0, 60, 7):
        # cut exactly after record k, and anywhere inside record k + 1's bytes
        for cut in {sizes[k], (sizes[k] + sizes[k + 1]) // 2, sizes[k + 1] - 1}:
            part = tmp_path / "cut.jsonl.gz"
            part.write_bytes(data[:cut])
            rec = read_trace(part)
            assert rec.meta["truncated"] is True
            p = rec.series[0].values[Metric.POWER_AVG_W]
            # every record flushed before the cut, in order, with no gap; a record whose
            # compressed bytes all made it (only the flush marker's tail cut) may come too
            assert k + 1 <= len(p) <= k + 2, cut
            np.testing.assert_array_equal(p, 100.0 + np.arange(len(p)), err_msg=f"cut {cut}")
            if cut == sizes[k]:
                assert len(p) == k + 1


def test_file_cut_inside_header(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"bubblewatch_trace":1,"gpus":[{"index":0')
    with pytest.raises(TraceError, match=r"t\.jsonl:1: file ends inside the header line"):
        read_trace(path)


def test_gzip_cut_inside_header(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    _write_many(path, 1)
    path.write_bytes(path.read_bytes()[:12])
    with pytest.raises(TraceError, match="file ends inside the header line"):
        read_trace(path)


# -- malformed input: each names file, line and field --------------------------

HEADER = '{"bubblewatch_trace":1,"gpus":[{"index":0},{"index":1}],"topology":null,"meta":{}}'


def _trace(tmp_path: Path, *records: str, header: str = HEADER) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([header, *records]) + "\n")
    return path


@pytest.mark.parametrize(
    ("record", "line", "field", "message"),
    [
        ('{"type":"sample","t":1,"gpu":0,"power_avg_w":NaN}', 2, "power_avg_w", "finite number"),
        ('{"type":"sample","t":1,"gpu":0,"power_avg_w":Infinity}', 2, "power_avg_w", "finite"),
        ('{"type":"sample","t":1,"gpu":0,"power_avg_w":1e400}', 2, "power_avg_w", "finite"),
        ('{"type":"sample","t":1,"gpu":0,"power_avg_w":-3.5}', 2, "power_avg_w", "must be >= 0 W"),
        ('{"type":"sample","t":1,"gpu":0,"sm_active_ratio":3.5}', 2, "sm_active_ratio", "<= 1"),
        ('{"type":"sample","t":1,"gpu":0,"power_avg_w":"150 W"}', 2, "power_avg_w", "number"),
        ('{"type":"sample","t":1,"gpu":0,"power_avg_w":true}', 2, "power_avg_w", "number"),
        ('{"type":"sample","t":1,"gpu":0,"clocks_event_reasons":4.5}', 2, None, "integer bitmask"),
        ('{"type":"sample","t":1,"gpu":0,"sm_busy":0.5}', 2, "sm_busy", "unknown metric"),
        ('{"type":"sample","t":NaN,"gpu":0}', 2, "t", "finite number of seconds"),
        ('{"type":"sample","gpu":0}', 2, "t", "finite number of seconds"),
        ('{"type":"sample","t":1,"gpu":-1}', 2, "gpu", "non-negative integer"),
        ('{"type":"sample","t":1,"gpu":"0"}', 2, "gpu", "non-negative integer"),
        ('{"type":"sample","t":1}', 2, "gpu", "non-negative integer"),
        ('{"type":"load","t":1,"running":-2}', 2, "running", "non-negative number or null"),
        ('{"type":"event","t":1,"kind":""}', 2, "kind", "non-empty string"),
        ('{"type":"event","t":1,"kind":"xid","gpu":-1}', 2, "gpu", "non-negative integer"),
        ('{"type":"event","t":1,"kind":"xid","detail":[1]}', 2, "detail", "must be an object"),
        ('{"type":"topology","t":1,"topology":{"stages":[[0],[0]]}}', 2, "topology", "stage 1"),
        ('{"type":"topology","t":1,"topology":[0,1]}', 2, "topology", "object or null"),
        ('{"type":"bogus","t":1}', 2, "type", "unknown record type 'bogus'"),
        ('{"t":1,"gpu":0}', 2, "type", "unknown record type None"),
        ("[1, 2]", 2, None, "must be a JSON object"),
    ],
)
def test_malformed_record(
    tmp_path: Path, record: str, line: int, field: str | None, message: str
) -> None:
    good = '{"type":"sample","t":0.5,"gpu":1,"power_avg_w":100}'
    path = _trace(tmp_path, good, record, good)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    e = err.value
    assert e.path == str(path) and e.line == line + 1
    if field is not None:
        assert e.field == field
        assert f"field {field!r}" in str(e)
    assert message in str(e)
    assert str(e).startswith(f"{path}:{line + 1}")


def test_malformed_json_in_the_middle_is_an_error_not_truncation(tmp_path: Path) -> None:
    path = _trace(tmp_path, '{"type":"sample","t":1,"gpu":0', '{"type":"load","t":2}')
    with pytest.raises(TraceError, match=r"bad\.jsonl:2: not valid JSON"):
        read_trace(path)


@pytest.mark.parametrize(
    ("header", "field", "message"),
    [
        ('{"bubblewatch_trace":2}', "bubblewatch_trace", "version 2 is not supported"),
        ('{"bubblewatch_trace":"1"}', "bubblewatch_trace", "version '1' is not supported"),
        ('{"bubblewatch_trace":true}', "bubblewatch_trace", "version True is not supported"),
        ('{"type":"sample","t":1,"gpu":0}', "bubblewatch_trace", "not a bubblewatch trace header"),
        ('{"bubblewatch_trace":1,"gpus":{}}', "gpus", "must be a list"),
        ('{"bubblewatch_trace":1,"gpus":[3]}', "gpus[0]", "must be an object"),
        ('{"bubblewatch_trace":1,"gpus":[{"index":-1}]}', "gpus[0]", "non-negative integer"),
        ('{"bubblewatch_trace":1,"gpus":[{"index":0},{"index":0}]}', "gpus[1]", "listed twice"),
        ('{"bubblewatch_trace":1,"meta":[]}', "meta", "must be an object"),
        ('{"bubblewatch_trace":1,"topology":{"stages":[[0,1],[1]]}}', "topology", "GPU 1"),
        ('{"bubblewatch_trace":1,"topology":{"stages":[[]]}}', "topology", "stage 0 has no GPUs"),
        (
            '{"bubblewatch_trace":1,"topology":{"stages":[[0],[1]],"pp_size":3}}',
            "topology",
            "'pp_size' is 3",
        ),
        ('{"bubblewatch_trace":1,"topology":{"engine":"sglang"}}', "topology", "needs 'stages'"),
        ('{"bubblewatch_trace":1,"topology":{"stages":[["a"]]}}', "topology", "stages[0]"),
    ],
)
def test_malformed_header(tmp_path: Path, header: str, field: str, message: str) -> None:
    path = _trace(tmp_path, header=header)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert err.value.line == 1 and err.value.field == field
    assert message in str(err.value)


def test_version_error_reads_as_documented(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"bubblewatch_trace":2}\n')
    with pytest.raises(TraceError) as err:
        read_trace(path)
    expected = (
        f"{path}:1: field 'bubblewatch_trace': trace format version 2 is not supported "
        "(this bubblewatch reads version 1)"
    )
    assert str(err.value) == expected


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty file: no header line"), (b"\n\n  \n", "no header line")],
)
def test_empty_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as err:
        read_trace(path)
    assert err.value.line == 1


def test_not_utf8_and_not_gzip(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(HEADER.encode() + b"\n\xff\xfe\x00garbage\n")
    with pytest.raises(TraceError, match="cannot decode"):
        read_trace(path)
    corrupt = tmp_path / "corrupt.jsonl.gz"
    # a gzip member header, then a deflate block of the reserved (invalid) type 3
    corrupt.write_bytes(gzip.compress(b"")[:10] + b"\x07" + b"\x00" * 32)
    with pytest.raises(TraceError, match="cannot decode"):
        read_trace(corrupt)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(tmp_path / "nope.jsonl")


def test_extensions_and_blank_lines_are_accepted(tmp_path: Path) -> None:
    path = _trace(
        tmp_path,
        "",
        '{"type":"sample","t":1,"gpu":0,"power_avg_w":null,"x_fan_pct":40,"sm_active_ratio":1.04}',
        '{"type":"x_vendor_blob","t":1,"data":[1,2,3]}',
        '{"type":"summary","samples":1}',
        header='{"bubblewatch_trace":1,"gpus":[{"index":0}],"x_writer":"test"}',
    )
    rec = read_trace(path)
    s = rec.series[0]
    assert set(s.values) == {Metric.SM_ACTIVE_RATIO}  # null and x_ keys are not metrics
    assert s.values[Metric.SM_ACTIVE_RATIO][0] == pytest.approx(1.04)  # rounding slack
    assert rec.meta == {"samples": 1}


def test_sample_for_gpu_missing_from_header_is_kept(tmp_path: Path) -> None:
    path = _trace(tmp_path, '{"type":"sample","t":1,"gpu":5,"power_avg_w":10}')
    rec = read_trace(path)
    assert rec.gpu_indices == (0, 1, 5)


# -- property: random valid recordings round-trip --------------------------------

_finite: dict[Metric, st.SearchStrategy[float]] = {
    m: st.floats(
        min_value=METRICS[m].lower or 0.0,
        max_value=METRICS[m].upper if METRICS[m].upper is not None else 1e12,
        allow_nan=False,
        allow_infinity=False,
    ).map(lambda v: round(v, 6))
    for m in Metric
    if m is not Metric.CLOCKS_EVENT_REASONS
}
_finite[Metric.CLOCKS_EVENT_REASONS] = st.integers(0, 0xFF).map(float)


@st.composite
def recordings(draw: st.DrawFn) -> Recording:
    n_gpus = draw(st.integers(1, 4))
    b = RecordingBuilder()
    for g in range(n_gpus):
        limit = draw(st.none() | st.floats(100, 1000).map(lambda v: round(v, 1)))
        b.add_gpu(GpuInfo(index=g, uuid=f"GPU-{g}", power_limit_w=limit))
    times = draw(st.lists(st.integers(0, 10**7), min_size=1, max_size=12, unique=True).map(sorted))
    for k in times:
        t = T0 + k / 1e6
        for g in range(n_gpus):
            metrics = draw(st.lists(st.sampled_from(list(Metric)), unique=True, max_size=5))
            b.add(Sample(t, g, {m: draw(_finite[m]) for m in metrics}))
    for k in draw(st.lists(st.integers(0, 10**7), max_size=4, unique=True)):
        opt = st.none() | st.integers(0, 512).map(float)
        b.add_load(LoadSample(T0 + k / 1e6, draw(opt), draw(opt)))
    if draw(st.booleans()):
        b.topology = Topology.from_sizes(1, n_gpus)
    return b.build()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rec=recordings(), gz=st.booleans())
def test_random_recordings_round_trip(tmp_path: Path, rec: Recording, gz: bool) -> None:
    path = tmp_path / ("p.jsonl.gz" if gz else "p.jsonl")
    write_trace(path, rec)
    back = read_trace(path)
    assert back.gpus == rec.gpus and back.topology == rec.topology
    for g, s in rec.series.items():
        np.testing.assert_array_equal(back.series[g].t_s, s.t_s)
        for m, v in s.values.items():
            if np.isfinite(v).any():  # an all-NaN column is "never reported": not written
                np.testing.assert_array_equal(back.series[g].values[m], v)
            else:
                assert m not in back.series[g].values or not back.series[g].has(m)
    np.testing.assert_array_equal(back.load.running, rec.load.running)
    np.testing.assert_array_equal(back.load.queued, rec.load.queued)


def test_recorded_fixture_of_a_killed_writer() -> None:
    """A gzip trace on disk whose writer died inside tick 31 (30 ticks complete)."""
    rec = read_trace(ROOT / "tests" / "fixtures" / "traces" / "killed-mid-write.jsonl.gz")
    cut = rec.meta.pop("truncation")
    assert rec.meta == {"host": "fixture", "truncated": True}
    # Where the intact part ends: the first line not read whole, after the header and
    # the 2 x 30 complete samples (and any of tick 31 that made it).
    assert cut["reason"] == "the gzip stream ends early" and cut["line"] >= 62
    assert len(rec.series[0]) >= 30 and len(rec.series[1]) >= 30
    np.testing.assert_allclose(rec.series[1].values[Metric.POWER_AVG_W][:30], 151.0 + np.arange(30))


def _write_record_by_record(path: Path, recording: Recording) -> None:
    """The reference: every row as a Sample or LoadSample through TraceWriter, merged by time."""
    with TraceWriter(
        path, gpus=recording.gpus, topology=recording.topology, meta=recording.meta
    ) as w:
        loads = list(load_samples(recording))
        li = 0
        for s in recording.samples():
            while li < len(loads) and loads[li].t_s <= s.t_s:
                w.load(loads[li])
                li += 1
            w.sample(s)
        for load in loads[li:]:
            w.load(load)
        for e in recording.events:
            w.event(e)


def test_write_trace_from_columns_writes_what_record_by_record_writing_does(tmp_path: Path):
    """The columnar writer must give the same bytes as the row writer it replaced."""
    from bubblewatch.model.recording import GpuSeries, LoadSeries
    from bubblewatch.sim import load_scenario, observe, simulate
    from bubblewatch.sources.trace import column_lines

    rec = _recording(40)
    # Extra GPU with its own metric set, a sample at a load's instant, NaN and inf cells.
    t = np.array([T0 + 0.0512347, T0 + 0.1, T0 + 0.1, T0 + 0.3])
    odd = GpuSeries(
        7,
        t,
        {
            Metric.TEMPERATURE_C: np.array([40.0, np.nan, 41.5, 1e16]),
            Metric.CLOCKS_EVENT_REASONS: np.array([4.0, 0.0, np.inf, 8.0]),
            Metric.SM_ACTIVE_RATIO: np.array([0.1234565, 1 / 3, 0.0, -0.0]),
        },
    )
    load = LoadSeries(
        np.array([T0, T0 + 0.1, T0 + 99.0]),
        np.array([1.0, np.nan, np.inf]),
        np.array([np.nan, 2.0, 3.0]),
    )
    rec = replace(rec, series={**rec.series, 7: odd}, load=load)
    sim = observe(simulate(load_scenario("pp4-imbalanced"), 8.0, 0), interval_s=0.25, seed=0)
    for name, r in (("hand", rec), ("sim", sim)):
        a, b = tmp_path / f"{name}-columns.jsonl", tmp_path / f"{name}-rows.jsonl"
        old = column_lines.DEFAULT_CHUNK_ROWS
        column_lines.DEFAULT_CHUNK_ROWS = 7  # several chunks, cut anywhere
        try:
            write_trace(a, r)
        finally:
            column_lines.DEFAULT_CHUNK_ROWS = old
        _write_record_by_record(b, r)
        assert a.read_text() == b.read_text(), name
