"""The daemon's trace recorder with rotation, and its files read back as one recording.

A rotation must never lose or duplicate a row (the rows of one poll stay
together in one file), every file must be a complete trace with the GPUs and
the topology in force in its header, and `analyze DIR` must read a day of
rotated files back whole. The day is played through the daemon's own
sampler and simulated source on a manual clock, not in real time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.record import Rotation
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.daemon.loop.ticks import Sampler
from bubblewatch.daemon.record.recorder import TraceRecorder, rotated_files
from bubblewatch.daemon.sources.simsource import SimSource
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.end_to_end import input_files, read_joined
from bubblewatch.sources.trace import TraceReader, read_trace

T0 = 1_750_000_000.0
GPUS = tuple(GpuInfo(index=g, uuid=f"GPU-{g}", name="X") for g in range(4))
P = Metric.POWER_AVG_W


class Clock:
    """One manual clock for the recorder's age (monotonic) and its file names (wall)."""

    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return T0 + self.t


def _recorder(path: Path, clock: Clock, rotation: Rotation, **kw: object) -> TraceRecorder:
    return TraceRecorder(
        path,
        GPUS,
        Topology.from_sizes(4, 1, source="test"),
        {"source": "test"},
        rotation=rotation,
        clock=clock.mono,
        wall_clock=clock.wall,
        **kw,  # type: ignore[arg-type]
    )


def _tick(rec: TraceRecorder, clock: Clock, k: int) -> list[tuple[int, float, float]]:
    """One poll of every GPU at tick k; returns what was written as (gpu, t, power)."""
    clock.t = float(k)
    rows = [Sample(T0 + k, g, {P: 100.0 + k + g / 10}) for g in range(4)]
    rec.add(rows)
    rec.add_load(LoadSample(T0 + k, float(k % 5), None))
    return [(r.gpu, r.t_s, r.values[P]) for r in rows]


def _read_all(files: list[Path]) -> list[tuple[int, float, float]]:
    out = []
    for f in files:
        rec = read_trace(f)
        for g, s in rec.series.items():
            out.extend((g, float(t), float(v)) for t, v in zip(s.t_s, s.values[P], strict=True))
    return out


@pytest.mark.parametrize(
    ("name", "rotation", "flush_every"),
    [
        ("run.jsonl", Rotation(max_size_bytes=4096), 1),
        ("run.jsonl.gz", Rotation(max_age_s=7.0), 4096),
        ("run.jsonl.gz", Rotation(max_size_bytes=4096, max_age_s=30.0), 1),
    ],
)
def test_rotation_never_loses_or_duplicates_a_row(
    tmp_path: Path, name: str, rotation: Rotation, flush_every: int
) -> None:
    clock = Clock()
    rec = _recorder(tmp_path / name, clock, rotation, flush_every=flush_every)
    written: list[tuple[int, float, float]] = []
    for k in range(200):
        written += _tick(rec, clock, k)
        if k == 120:
            rec.events([Event(T0 + k, "xid", 2, {"code": 79})])
    rec.close()
    files = rotated_files(tmp_path / name)
    assert not (tmp_path / name).exists()  # with rotation, only the named parts exist
    assert len(files) >= 5, [f.name for f in files]
    got = _read_all(files)
    assert len(got) == len(written) == 800
    assert sorted(got) == sorted(written)
    loads = [float(t) for f in files for t in read_trace(f).load.t_s]
    assert sorted(loads) == [T0 + k for k in range(200)]
    # Each file is a whole trace: header first, the GPUs and topology in it, a part number.
    for i, f in enumerate(files, start=1):
        r = TraceReader(f)
        for _ in r:
            pass
        assert [g.uuid for g in r.gpus] == [g.uuid for g in GPUS]
        assert r.topology is not None and r.topology.pp_size == 4
        assert r.header["meta"]["part"] == i and r.header["meta"]["source"] == "test"
        assert not read_trace(f).meta.get("truncated")
    # A poll's rows are never split across files.
    for f in files:
        t = read_trace(f).series[0].t_s
        for g in range(1, 4):
            assert np.array_equal(read_trace(f).series[g].t_s, t)


def test_rotated_files_carry_the_topology_in_force_and_old_ones_are_pruned(
    tmp_path: Path,
) -> None:
    clock = Clock()
    rec = _recorder(tmp_path / "t.jsonl", clock, Rotation(max_age_s=10.0, keep=3))
    new_topo = Topology.from_sizes(2, 2, source="test")
    for k in range(100):
        _tick(rec, clock, k)
        if k == 45:
            rec.topology(T0 + k, new_topo)
    rec.close()
    files = rotated_files(tmp_path / "t.jsonl")
    assert len(files) == 3  # keep: the newest three, the current one included
    first_kept = read_trace(files[0])
    assert first_kept.start_s == T0 + 70  # files of 10 s each: 70-79, 80-89, 90-99
    for f in files:
        r = TraceReader(f)
        for _ in r:
            pass
        assert r.topology == new_topo  # started after the change: the header has it


def test_a_file_that_cannot_be_opened_keeps_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import errno

    import bubblewatch.daemon.record.recorder as recorder_mod

    full = [False]
    real = recorder_mod.TraceWriter

    def writer(*args: object, **kw: object) -> object:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(recorder_mod, "TraceWriter", writer)
    clock = Clock()
    rec = _recorder(tmp_path / "t.jsonl", clock, Rotation(max_age_s=5.0))
    for k in range(3):
        _tick(rec, clock, k)
    full[0] = True  # the rotations due from k = 5 fail: the first file goes on
    for k in range(3, 9):
        _tick(rec, clock, k)
    full[0] = False
    for k in range(9, 12):  # the next rotation succeeds
        _tick(rec, clock, k)
    rec.close()
    files = rotated_files(tmp_path / "t.jsonl")
    assert len(files) == 2
    assert read_trace(files[0]).end_s == T0 + 8
    assert len(_read_all(files)) == 12 * 4
    assert "cannot start a new trace file" in caplog.text


def test_record_section_and_flags(tmp_path: Path) -> None:
    p = tmp_path / "bw.yml"
    p.write_text("record:\n  path: traces/run.jsonl.gz\n  max_size: 64MB\n  max_age: 1h\n")
    cfg = load_config(p, env={})
    assert cfg.record.path == tmp_path / "traces" / "run.jsonl.gz"
    assert cfg.record.rotation == Rotation(64 << 20, 3600.0, 0)
    cfg = load_config(
        None,
        {"--record": "/x/r.jsonl", "--record.max-size": "1.5GB", "--record.keep": "48"},
        env={},
    )
    assert cfg.record.rotation == Rotation(int(1.5 * (1 << 30)), 0.0, 48)
    with pytest.raises(ConfigError, match=r"--record.max-size.*expected a size like"):
        load_config(None, {"--record": "/x/r.jsonl", "--record.max-size": "big"}, env={})
    p.write_text("record:\n  max_age: 1h\n")
    with pytest.raises(ConfigError, match=r"bw.yml:2: field 'record.max_age'.*record.path"):
        load_config(p, env={})
    p.write_text("record:\n  path: r.jsonl\n  keep: 3\n")
    with pytest.raises(ConfigError, match=r"'record.keep'.*needs rotation"):
        load_config(p, env={})


def test_a_simulated_day_of_rotated_files_reads_back_whole(tmp_path: Path, capsys) -> None:
    """The acceptance case: a day through the daemon's sampler, hourly files, `analyze DIR`."""
    clock = Clock()
    src = SimSource("pp8-serialized", wall_clock=clock.wall)
    d = tmp_path / "recordings"
    d.mkdir()
    topo = src.topologies()[0]

    def recorder() -> TraceRecorder:
        return TraceRecorder(
            d / "gpu.jsonl.gz",
            src.gpus(),
            topo,
            {"source": "bubblewatch run"},
            rotation=Rotation(max_size_bytes=1 << 20, max_age_s=3600.0),
            clock=clock.mono,
            wall_clock=clock.wall,
        )

    class Seen:
        """A second sink: every row the sampler handed out."""

        def __init__(self) -> None:
            self.rows: list[tuple[int, float]] = []

        def add(self, samples: list[Sample]) -> int:
            self.rows += [(s.gpu, s.t_s) for s in samples]
            return len(samples)

        def add_load(self, load: LoadSample) -> None:
            pass

    seen = Seen()
    interval_s, day_s, restart_s = 20.0, 86_400.0, 43_200.0
    rec = recorder()
    sampler = Sampler(src, [rec, seen], load=src, clock=clock.mono)
    k = 0
    while k * interval_s < day_s:
        now = k * interval_s
        if restart_s <= now < restart_s + 600:  # the daemon was down for 10 minutes
            k += 1
            continue
        if now == restart_s + 600:
            rec.close()
            rec = recorder()
            sampler = Sampler(src, [rec, seen], load=src, clock=clock.mono)
        clock.t = now
        sampler._tick(now)
        if k % 30 == 0:  # the main loop flushes after each analysis
            rec.flush()
        k += 1
    rec.close()

    files = input_files(str(d))
    assert files is not None and len(files) >= 24
    joined = read_joined(files, read_trace)
    got = sorted((g, float(t)) for g, s in joined.series.items() for t in s.t_s)
    assert got == sorted(seen.rows)  # every row, once
    assert len(got) == 8 * (4320 - 30)
    assert joined.duration_s == pytest.approx(day_s - interval_s)
    gaps = joined.meta["gaps"]
    assert [round(g["seconds"]) for g in gaps] == [620]  # the restart, kept as a gap
    assert joined.topology == topo

    assert main(["analyze", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_samples"] == len(got)
    assert day_s - interval_s <= out["window_s"] <= day_s  # the span, plus one interval
    assert out["verdict"] == "serialized"
