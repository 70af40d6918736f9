"""PyTorch profiler traces as a source: exact busy times, stages, stagger, bad files."""

from __future__ import annotations

import gzip
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.errors import InputError
from bubblewatch.model import Metric
from bubblewatch.sources.kineto import KinetoOptions, is_kineto_trace, load_kineto

from .kineto_gen import PipelineSpec, write_pipeline_traces

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kineto"
SERIAL = PipelineSpec(pp=4, in_flight=1, duration_s=3.0)
HEALTHY = replace(SERIAL, in_flight=4)


@pytest.fixture(scope="module")
def serialized(tmp_path_factory: pytest.TempPathFactory):
    g = write_pipeline_traces(tmp_path_factory.mktemp("serial"), SERIAL)
    return g, load_kineto(g.paths[0].parent)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory):
    g = write_pipeline_traces(tmp_path_factory.mktemp("healthy"), HEALTHY)
    return g, load_kineto(g.paths[0].parent)


def test_busy_times_match_the_kernel_intervals(serialized, healthy):
    for g, rec in (serialized, healthy):
        ranks = rec.meta["kineto"]["ranks"]
        assert sorted(int(r) for r in ranks) == [0, 1, 2, 3]
        for r, truth in g.truth.items():
            got = ranks[str(r)]["compute_busy_s"]
            assert got == pytest.approx(truth.compute_ns / 1e9, rel=1e-6)
            # The side-stream kernel overlaps a main one: union, not sum of durations.
            assert ranks[str(r)]["n_compute_kernels"] > 0


def test_binned_activity_integrates_to_the_exact_busy_time(serialized, healthy):
    for g, rec in (serialized, healthy):
        bin_s = rec.meta["kineto"]["bin_s"]
        for r, truth in g.truth.items():
            s = rec.series[r]
            sm = s.values[Metric.SM_ACTIVE_RATIO]
            kb = s.values[Metric.KERNEL_BUSY_RATIO]
            assert np.nansum(sm) * bin_s == pytest.approx(truth.compute_ns / 1e9, rel=0.01)
            assert np.all(kb[np.isfinite(kb)] >= sm[np.isfinite(sm)] - 1e-9)
            assert np.nanmax(sm) <= 1.0 + 1e-9
            assert np.allclose(np.diff(s.t_s), bin_s, atol=1e-6)  # epoch seconds: ~0.2 µs ulp


def test_serialized_pipeline_has_one_stage_busy_at_a_time(serialized):
    _, rec = serialized
    k = rec.meta["kineto"]
    assert k["concurrency"] == pytest.approx(4 * 10_000 / (4 * 10_170 + 300), rel=0.02)
    assert set(k["busy_stages_time_s"]) == {"1"}
    assert [st["stage"] for st in k["stages"]] == [0, 1, 2, 3]
    # A stage starts one stage step plus the link after the previous one.
    for st in k["stagger"]:
        assert st["median_us"] == pytest.approx(SERIAL.stage_us + SERIAL.link_us, abs=1.0)
        assert st["n"] >= 50
    # Waiting stages spin in NCCL: any-kernel busy ~1 while compute ~1/4.
    r1 = rec.series[1]
    assert np.nanmean(r1.values[Metric.KERNEL_BUSY_RATIO]) > 0.95
    assert np.nanmean(r1.values[Metric.SM_ACTIVE_RATIO]) < 0.3
    assert k["ranks"]["1"]["comm_only_s"] > 2.0
    assert k["ranks"]["1"]["idle_gaps"]["over_1ms"] >= 50
    assert rec.topology is not None and rec.topology.pp_size == 4


def test_healthy_pipeline_keeps_all_stages_busy(healthy):
    _, rec = healthy
    k = rec.meta["kineto"]
    assert k["concurrency"] > 3.6
    assert max(k["busy_stages_time_s"], key=lambda n: k["busy_stages_time_s"][n]) == "4"
    assert all(st["busy_ratio"] > 0.9 for st in k["stages"])


def test_launches_and_window_are_reported(serialized):
    _, rec = serialized
    r0 = rec.meta["kineto"]["ranks"]["0"]
    assert r0["launches"]["kernel"] > 0 and r0["launches"]["graph"] == 0
    assert r0["span_s"] == pytest.approx(SERIAL.duration_s, abs=0.05)
    assert rec.gpus[0].name == "NVIDIA H100 80GB HBM3"
    json.dumps(dict(rec.meta))  # meta must travel in a trace header


def test_ranks_from_distributed_info_override_file_order(tmp_path):
    g = write_pipeline_traces(tmp_path, replace(SERIAL, duration_s=0.3, naming="plain"))
    # File names say nothing; distributedInfo has the rank.
    rec = load_kineto(list(reversed(g.paths)))
    assert rec.gpu_indices == (0, 1, 2, 3)
    assert rec.meta["kineto"]["topology_source"] == "assumed"


def test_ranks_from_vllm_file_names_and_gzip(tmp_path):
    spec = replace(SERIAL, duration_s=0.3, naming="vllm", gzip=True, distributed_info=False)
    g = write_pipeline_traces(tmp_path, spec)
    rec = load_kineto(tmp_path)
    assert rec.gpu_indices == (0, 1, 2, 3)
    for r, truth in g.truth.items():
        assert rec.meta["kineto"]["ranks"][str(r)]["compute_busy_s"] == pytest.approx(
            truth.compute_ns / 1e9, rel=1e-6
        )


def test_file_order_is_used_with_a_warning_when_nothing_names_the_rank(tmp_path, caplog):
    spec = replace(SERIAL, pp=2, duration_s=0.2, naming="plain", distributed_info=False)
    write_pipeline_traces(tmp_path, spec)
    with caplog.at_level(logging.WARNING):
        rec = load_kineto(tmp_path)
    assert rec.gpu_indices == (0, 1)
    assert "ranks follow file order" in caplog.text


def test_tp_groups_come_from_process_groups(tmp_path):
    spec = replace(SERIAL, pp=2, tp=2, duration_s=0.4, naming="plain")
    write_pipeline_traces(tmp_path, spec)
    rec = load_kineto(tmp_path)
    assert rec.topology is not None
    assert rec.topology.stages == ((0, 1), (2, 3))
    assert rec.meta["kineto"]["topology_source"] == "process_groups"
    # All-reduce kernels count as communication, not compute.
    assert rec.meta["kineto"]["ranks"]["0"]["comm_s"] > 0


def test_sglang_file_names_give_stages(tmp_path):
    spec = replace(SERIAL, pp=2, tp=2, duration_s=0.3, distributed_info=False)
    write_pipeline_traces(tmp_path, spec)
    rec = load_kineto(tmp_path)
    assert rec.topology is not None and rec.topology.stages == ((0, 1), (2, 3))
    assert rec.meta["kineto"]["topology_source"] == "filenames"


def test_options_set_the_topology_and_grid(tmp_path):
    spec = replace(SERIAL, pp=2, tp=2, duration_s=0.3, naming="plain", process_groups=False)
    write_pipeline_traces(tmp_path, spec)
    rec = load_kineto(tmp_path, KinetoOptions(pp_size=2, tp_size=2, bin_s=0.005))
    assert rec.topology is not None and rec.topology.stages == ((0, 1), (2, 3))
    assert np.diff(rec.series[0].t_s)[0] == pytest.approx(0.005, abs=1e-6)
    with pytest.raises(InputError, match="does not fit pp_size 1 x tp_size 2"):
        load_kineto(tmp_path, KinetoOptions(pp_size=1, tp_size=2))
    with pytest.raises(ValueError, match="bin_s"):
        KinetoOptions(bin_s=0)


def test_truncated_file_yields_the_complete_events_with_a_warning(tmp_path, caplog):
    g = write_pipeline_traces(tmp_path / "t", replace(SERIAL, pp=2, duration_s=0.5))
    full = load_kineto(g.paths).meta["kineto"]["ranks"]["1"]["n_compute_kernels"]
    data = g.paths[1].read_bytes()
    g.paths[1].write_bytes(data[: len(data) * 2 // 3])
    with caplog.at_level(logging.WARNING):
        rec = load_kineto(g.paths)
    assert "ends early (truncated)" in caplog.text
    assert rec.meta["truncated"] is True
    assert rec.meta["kineto"]["truncated_files"] == [str(g.paths[1])]
    part = rec.meta["kineto"]["ranks"]["1"]["n_compute_kernels"]
    assert 0.5 * full < part < 0.8 * full


def test_truncated_gzip_file(tmp_path, caplog):
    g = write_pipeline_traces(tmp_path, replace(SERIAL, pp=2, duration_s=0.5, gzip=True))
    data = g.paths[0].read_bytes()
    g.paths[0].write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        rec = load_kineto(g.paths)
    assert rec.meta["kineto"]["ranks"]["0"]["truncated"] is True
    assert rec.meta["kineto"]["ranks"]["0"]["n_compute_kernels"] > 0


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_malformed_json_names_file_and_line(tmp_path):
    good = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}'
    p = _write(
        tmp_path / "bad.json",
        '{\n  "schemaVersion": 1,\n  "traceEvents": [\n  ' + good + ',\n  {"ph": X}\n  ]\n}',
    )
    with pytest.raises(InputError) as e:
        load_kineto(p)
    assert str(p) in str(e.value) and ":5" in str(e.value)
    assert "not valid JSON" in str(e.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty file"),
        ("[1, 2]", "expected a JSON object"),
        ('{"schemaVersion": 1, "foo": []}', "no 'traceEvents' array"),
        ('{"traceEvents": 5}', "expected an array under 'traceEvents'"),
        ('{"traceEvents": [1]}', r"traceEvents\[0\] must be an object"),
        (
            '{"traceEvents": [\n{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "ts": "7"}]}',
            "field 'ts'.*finite number",
        ),
        (
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, '
            '"ts": 1, "dur": -3}]}',
            "duration must be >= 0",
        ),
        (
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": "GPU", '
            '"ts": 1, "dur": 3}]}',
            "device index",
        ),
        ('{"distributedInfo": {"rank": -1}, "traceEvents": []}', "distributedInfo.rank"),
        ('{"traceEvents": []}', "hold no events"),
    ],
)
def test_bad_files_get_specific_errors(tmp_path, text, match):
    p = _write(tmp_path / "x.json", text)
    with pytest.raises(InputError, match=match) as e:
        load_kineto(p)
    assert str(p) in str(e.value)


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        load_kineto(tmp_path / "nope.json")
    with pytest.raises(InputError, match="no profiler trace files"):
        load_kineto(tmp_path)


def test_duplicate_rank_is_an_error(tmp_path):
    g = write_pipeline_traces(tmp_path / "a", replace(SERIAL, pp=2, duration_s=0.2))
    copy = tmp_path / "copy.json"
    copy.write_bytes(g.paths[0].read_bytes())
    with pytest.raises(InputError, match="rank 0 appears twice"):
        load_kineto([g.paths[0], copy])


def test_sniffing(tmp_path):
    g = write_pipeline_traces(tmp_path / "d", replace(SERIAL, pp=2, duration_s=0.1, gzip=True))
    assert is_kineto_trace(g.paths[0])
    assert is_kineto_trace(tmp_path / "d")
    other = _write(tmp_path / "o.json", '{"bubblewatch_trace": 1}')
    assert not is_kineto_trace(other)
    assert not is_kineto_trace(tmp_path / "missing.json")


def test_checked_in_fixtures_load():
    rec = load_kineto(FIXTURES / "pp2-tiny")
    assert rec.gpu_indices == (0, 1)
    assert rec.meta["kineto"]["ranks"]["0"]["compute_busy_s"] > 0
    with gzip.open(FIXTURES / "pp2-tiny" / "1760000000.123-TP-0-PP-1.trace.json.gz", "rt") as f:
        assert json.load(f)["distributedInfo"]["rank"] == 1


@pytest.mark.parametrize(("in_flight", "verdict"), [(1, "serialized"), (4, "healthy")])
def test_the_detector_gets_the_right_verdict(tmp_path, in_flight, verdict):
    from bubblewatch.detect import diagnose

    g = write_pipeline_traces(tmp_path, replace(SERIAL, in_flight=in_flight, duration_s=11.0))
    rec = load_kineto(g.paths)
    d = diagnose(rec)
    assert d.verdict.value == verdict
    # The stage busy times the detector sees agree with the kernel intervals within 1 %.
    for st in d.stages:
        exact = g.truth[st.gpus[0]].compute_ns / 1e9 / rec.meta["kineto"]["span_s"]
        assert st.sm_active_ratio == pytest.approx(exact, rel=0.01)
