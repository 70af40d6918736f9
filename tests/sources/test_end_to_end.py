"""Several files read as one recording: time order, gaps, late rows, and what is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.errors import InputError
from bubblewatch.model import GpuInfo, LoadSample, Metric, RecordingBuilder, Sample, Topology
from bubblewatch.model.recording import Recording
from bubblewatch.sources.end_to_end import input_files, join_end_to_end, read_joined
from bubblewatch.sources.trace import read_trace, write_trace

T0 = 1_795_940_000.0
P = Metric.POWER_AVG_W
S = Metric.SM_ACTIVE_RATIO


def _part(
    start_s: float,
    n: int,
    *,
    host: str = "node-1",
    uuids: tuple[str, ...] = ("GPU-0", "GPU-1"),
    extra_t: tuple[float, ...] = (),
    topology: Topology | None = None,
    sm: bool = True,
) -> Recording:
    b = RecordingBuilder()
    for g, u in enumerate(uuids):
        b.add_gpu(GpuInfo(index=g, uuid=u, name="NVIDIA H100"))
    b.topology = topology or Topology.from_sizes(len(uuids), 1, source="argv")
    b.meta.update({"host": host, "part": 1})
    times = [start_s + k for k in range(n)] + list(extra_t)
    for t in times:
        for g in range(len(uuids)):
            vals = {P: 100.0 + (t - T0) + g}
            if sm:
                vals[S] = 0.5
            b.add(Sample(t, g, vals))
        b.add_load(LoadSample(t, 1.0, None))
    return b.build()


def _write(d: Path, name: str, rec: Recording) -> Path:
    p = d / name
    write_trace(p, rec)
    return p


def test_files_are_joined_in_time_order_with_gaps_kept(tmp_path: Path) -> None:
    # Named so that name order is not time order.
    _write(tmp_path, "b.jsonl.gz", _part(T0, 10))
    _write(tmp_path, "a.jsonl", _part(T0 + 100, 10, sm=False))
    _write(tmp_path, "c.jsonl", _part(T0 + 10, 5))
    files = input_files(str(tmp_path))
    assert files is not None and [Path(f).name for f in files] == [
        "a.jsonl",
        "b.jsonl.gz",
        "c.jsonl",
    ]
    rec = read_joined(files, read_trace)
    t = rec.series[0].t_s
    assert t.tolist() == [T0 + k for k in range(15)] + [T0 + 100 + k for k in range(10)]
    # A metric one file lacks is NaN there, not zero and not dropped.
    sm = rec.series[1].values[S]
    assert np.isnan(sm[15:]).all() and (sm[:15] == 0.5).all()
    assert rec.load.t_s.tolist() == t.tolist()
    assert [Path(f["path"]).name for f in rec.meta["files"]] == ["b.jsonl.gz", "c.jsonl", "a.jsonl"]
    assert rec.meta["gaps"] == [{"start_s": T0 + 14, "end_s": T0 + 100, "seconds": 86.0}]
    assert "part" not in rec.meta and rec.meta["host"] == "node-1"


def test_a_glob_names_the_files_and_rows_arriving_late_are_merged(tmp_path: Path) -> None:
    # A driver-buffered row of t0+9.5 written after the rotation, into the next file.
    _write(tmp_path, "run-1.jsonl", _part(T0, 10))
    _write(tmp_path, "run-2.jsonl", _part(T0 + 10, 10, extra_t=(T0 + 9.5,)))
    _write(tmp_path, "other.jsonl", _part(T0 + 500, 3))
    files = input_files(str(tmp_path / "run-*.jsonl"))
    assert files is not None and len(files) == 2
    rec = read_joined(files, read_trace)
    t = rec.series[0].t_s
    assert (np.diff(t) > 0).all() and len(t) == 21 and T0 + 9.5 in t
    p = rec.series[0].values[P]
    assert p[list(t).index(T0 + 9.5)] == 100.0 + 9.5


def test_single_files_and_profiler_directories_are_not_expanded(tmp_path: Path) -> None:
    f = _write(tmp_path, "one.jsonl", _part(T0, 3))
    assert input_files(str(f)) is None
    assert input_files(str(tmp_path / "missing.jsonl")) is None  # the reader says it is missing
    with pytest.raises(InputError, match="no file matches"):
        input_files(str(tmp_path / "nothing-*.jsonl"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".hidden").write_text("x")
    with pytest.raises(InputError, match=r"directory without .* or any other recording file"):
        input_files(str(empty))
    # A directory of profiler traces is one recording of its own reader.
    kineto = Path(__file__).resolve().parents[1] / "fixtures" / "kineto" / "pp2-tiny"
    assert input_files(str(kineto)) is None


def test_files_of_different_hosts_or_gpus_are_refused(tmp_path: Path) -> None:
    a = _write(tmp_path, "a.jsonl", _part(T0, 5))
    b = _write(tmp_path, "b.jsonl", _part(T0 + 5, 5, host="node-2"))
    c = _write(tmp_path, "c.jsonl", _part(T0 + 5, 5, uuids=("GPU-0", "GPU-9")))
    d = _write(tmp_path, "d.jsonl", _part(T0 + 5, 5, uuids=("GPU-0", "GPU-1", "GPU-2")))
    with pytest.raises(InputError, match=r"b.jsonl: recorded on host 'node-2', but .*a.jsonl on "):
        read_joined([str(a), str(b)], read_trace)
    with pytest.raises(InputError, match=r"c.jsonl: not the same GPUs as .*GPU 1 is 'GPU-9' here"):
        read_joined([str(a), str(c)], read_trace)
    with pytest.raises(InputError, match=r"GPU\(s\) \[0, 1, 2\] here, \[0, 1\] there"):
        read_joined([str(a), str(d)], read_trace)


def test_the_same_samples_twice_are_refused(tmp_path: Path) -> None:
    a = _write(tmp_path, "a.jsonl", _part(T0, 5))
    shutil.copy(a, tmp_path / "copy-of-a.jsonl")
    with pytest.raises(InputError, match=r"GPU 0 has a sample at t=.* in both this file and"):
        read_joined(input_files(str(tmp_path)) or [], read_trace)


def test_a_topology_change_between_files_becomes_an_event() -> None:
    first = _part(T0, 5)
    second = _part(T0 + 60, 5, topology=Topology.from_sizes(1, 2, source="argv"))
    rec = join_end_to_end([("x", first), ("y", second)])
    changes = [e for e in rec.events if e.kind == "topology_change"]
    assert [e.t_s for e in changes] == [T0 + 60]
    assert rec.topology == second.topology


def test_analyze_and_compare_take_a_directory(tmp_path: Path, capsys) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    for k in range(3):
        _write(before, f"t-{k}.jsonl.gz", _part(T0 + 20 * k, 20))
        _write(after, f"t-{k}.jsonl.gz", _part(T0 + 1000 + 20 * k, 20))
    assert main(["analyze", str(before), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_samples"] == 2 * 60
    assert main(["compare", str(before), str(tmp_path / "after" / "t-*.jsonl.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["before"]["label"] == "before"
    (after / "t-1.jsonl.gz").write_bytes(b"not a trace")
    assert main(["analyze", str(after)]) == 2
    err = capsys.readouterr().err
    assert "t-1.jsonl.gz" in err and "Traceback" not in err
