"""A recording as a stream of pieces: windows over it, and a directory of files piece by piece."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.errors import InputError
from bubblewatch.model import GpuInfo, LoadSample, Metric, Recording, RecordingBuilder, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.end_to_end import read_joined
from bubblewatch.sources.end_to_end_stream import joined_pieces
from bubblewatch.sources.stream import concat, windows
from bubblewatch.sources.trace import TraceReader, read_trace, write_trace

T0 = 1_800_000_000.0
P = Metric.POWER_AVG_W


def _rec(ticks: range, *, late: tuple[float, ...] = (), topo: Topology | None = None) -> Recording:
    b = RecordingBuilder()
    for g in range(2):
        b.add_gpu(GpuInfo(index=g, uuid=f"GPU-{g}"))
    b.topology = topo or Topology.from_sizes(2, 1, source="test")
    b.meta["host"] = "node-1"
    for k in ticks:
        for g in range(2):
            b.add(Sample(T0 + k, g, {P: 100.0 + k + g}))
        b.add_load(LoadSample(T0 + k, 1.0, 0.0))
    for t in late:
        b.add(Sample(t, 0, {P: 1.0}))
    return b.build()


def _rows(recs: list[Recording]) -> list[tuple[int, float, float]]:
    return sorted(
        (g, float(t), float(v))
        for r in recs
        for g, s in r.series.items()
        for t, v in zip(s.t_s, s.values.get(P, np.full(len(s), np.nan)), strict=True)
    )


def test_windows_hand_on_every_row_once_in_time_order() -> None:
    pieces = [_rec(range(0, 100)), _rec(range(100, 130)), _rec(range(400, 500))]  # a gap
    pieces[-1] = replace(pieces[-1], meta={"final": True})
    out = list(windows(iter(pieces), length_s=30.0, max_samples=10_000))
    assert _rows(out) == _rows(pieces)
    starts = [w.start_s for w in out if w.n_samples]
    assert starts == sorted(starts)
    assert all(w.duration_s < 30.0 for w in out)
    assert not any(w.start_s < T0 + 400 < w.end_s for w in out if w.n_samples)  # gap skipped
    assert out[-1].meta == {"final": True}
    assert sum(len(w.load) for w in out) == 230


def test_windows_are_shortened_to_hold_about_max_samples() -> None:
    out = list(windows(iter([_rec(range(0, 1000))]), length_s=600.0, max_samples=100))
    assert max(w.n_samples for w in out) <= 100 and sum(w.n_samples for w in out) == 2000


def test_a_late_row_goes_into_the_next_window_not_lost() -> None:
    pieces = [_rec(range(0, 50)), _rec(range(50, 100), late=(T0 + 10.5,))]
    out = list(windows(iter(pieces), length_s=20.0, max_samples=10_000))
    assert _rows(out) == _rows(pieces)


def test_trace_pieces_laid_end_to_end_are_the_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, _rec(range(0, 3000)))
    whole = read_trace(path)
    again = concat(list(TraceReader(path).pieces(samples=500)))
    assert _rows([again]) == _rows([whole]) and again.meta == whole.meta
    np.testing.assert_array_equal(again.load.t_s, whole.load.t_s)


def _parts(tmp_path: Path, spans: list[range], **kw: object) -> list[str]:
    files = []
    for i, ticks in enumerate(spans):
        path = tmp_path / f"part{i:02d}.jsonl"
        write_trace(path, _rec(ticks, **kw))  # type: ignore[arg-type]
        files.append(str(path))
    return files


def _pieces(files: list[str]) -> list[Recording]:
    return list(joined_pieces(files, lambda f: TraceReader(f).pieces(samples=64)))


def test_joined_pieces_are_what_read_joined_makes(tmp_path: Path) -> None:
    files = _parts(tmp_path, [range(0, 100), range(100, 200), range(260, 400)])
    whole = read_joined(list(reversed(files)), read_trace)
    pieces = _pieces(list(reversed(files)))
    streamed = concat(pieces)
    assert _rows([streamed]) == _rows([whole])
    assert streamed.meta["files"] == whole.meta["files"]
    assert streamed.meta["gaps"] == whole.meta["gaps"] and len(whole.meta["gaps"]) == 1
    assert [p.start_s for p in pieces if p.n_samples] == sorted(
        p.start_s for p in pieces if p.n_samples
    )


def test_joined_pieces_refuse_a_file_given_twice_as_read_joined_does(tmp_path: Path) -> None:
    files = _parts(tmp_path, [range(0, 100), range(100, 200)])
    copy = tmp_path / "part01-copy.jsonl"
    copy.write_bytes(Path(files[1]).read_bytes())
    files.append(str(copy))
    with pytest.raises(InputError) as whole:
        read_joined(files, read_trace)
    with pytest.raises(InputError) as streamed:
        _pieces(files)
    assert str(streamed.value) == str(whole.value)


def test_joined_pieces_accept_rows_reaching_into_the_last_file(tmp_path: Path) -> None:
    """Buffered rows written after a rotation carry times of the file before."""
    files = _parts(tmp_path, [range(0, 100)])
    late = tmp_path / "part01.jsonl"
    write_trace(late, _rec(range(100, 200), late=(T0 + 98.5,)))
    files.append(str(late))
    assert _rows([concat(_pieces(files))]) == _rows([read_joined(files, read_trace)])


def test_joined_pieces_note_a_topology_change_between_files(tmp_path: Path) -> None:
    first = _parts(tmp_path, [range(0, 50)])
    later = tmp_path / "part01.jsonl"
    write_trace(later, _rec(range(60, 100), topo=Topology.from_sizes(1, 2, source="test")))
    files = [*first, str(later)]
    whole = read_joined(files, read_trace)
    streamed = concat(_pieces(files))
    assert streamed.events == whole.events and len(whole.events) == 1
    assert math.isclose(streamed.events[0].t_s, T0 + 60)
