"""A full recording disk: the recorder stops (said once), keeps its files readable, resumes.

Pins down issue 22 item 5: on an 80 KB file system the daemon's recorder left
a zero-byte file per poll (130 after 70 s, not pruned by `record.keep`), and
`analyze DIR` then failed on the first empty one, so even the good files could
not be read. Played on a real tmpfs filled to the last byte where the test
may mount one (root), and always against a file whose writes fail with
ENOSPC at the OS call.
"""

from __future__ import annotations

import errno
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from daemon.test_record_rotation import T0, Clock  # tests/ is on the pytest path
from prometheus_client import CollectorRegistry, generate_latest

import bubblewatch.sources.trace.writer as writer_mod
from bubblewatch.cli.main import main
from bubblewatch.daemon.config.record import Rotation
from bubblewatch.daemon.record.recorder import TraceRecorder, rotated_files
from bubblewatch.daemon.record.stats import RecordCollector
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Sample
from bubblewatch.sources.trace import read_trace
from hostile.conftest import fill

GPUS = tuple(GpuInfo(index=g, uuid=f"GPU-{g}", name="X") for g in range(8))
STOPPED = "trace recording stopped"
RESUMED = "trace recording resumed"


def _recorder(path: Path, clock: Clock, rotation: Rotation) -> TraceRecorder:
    return TraceRecorder(
        path, GPUS, None, {}, rotation=rotation, clock=clock.mono, wall_clock=clock.wall
    )


def _polls(rec: TraceRecorder, clock: Clock, start: int, n: int) -> None:
    """n polls of 8 GPUs, 4 a second, flushed once a second (as analyses do)."""
    for k in range(start, start + n):
        clock.t = k / 4
        rec.add([Sample(T0 + clock.t, g, {Metric.POWER_AVG_W: 300.0 + g}) for g in range(8)])
        if k % 4 == 0:
            rec.flush()


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if r.getMessage().startswith(text))


def _sizes(d: Path) -> list[int]:
    return [p.stat().st_size for p in sorted(d.iterdir())]


def test_a_full_small_disk_stops_recording_once_and_resumes_when_space_returns(
    small_fs: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="bubblewatch.recorder")
    clock = Clock()
    rec = _recorder(small_fs / "t.jsonl", clock, Rotation(max_size_bytes=8192, keep=20))
    _polls(rec, clock, 0, 40)  # 10 s: a few files
    free = fill(small_fs)
    _polls(rec, clock, 40, 280)  # 70 s on a full disk (was 130 zero-byte files)
    assert not rec.writing
    files_when_full = sorted(p for p in small_fs.iterdir() if p.name != "filler")
    assert files_when_full and 0 not in _sizes(small_fs)
    _polls(rec, clock, 320, 160)  # 40 s more, four tries at a new file
    assert sorted(p for p in small_fs.iterdir() if p.name != "filler") == files_when_full
    assert _messages(caplog, STOPPED) == 1
    assert rec.stats.stops == 1 and rec.stats.dropped_total > 0

    # The files so far read back as one recording (the last one cut short).
    free()
    assert main(["analyze", str(small_fs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_samples"] > 0 and "skipped_files" not in out

    _polls(rec, clock, 480, 44)  # space returned
    assert rec.writing
    assert _messages(caplog, RESUMED) == 1
    rec.close()
    newest = rotated_files(small_fs / "t.jsonl")[-1]
    assert newest not in files_when_full
    assert read_trace(newest).n_samples > 0


class _FullDisk(io.StringIO):
    """A text file whose writes reach the disk only while `space[0]` is True."""

    def __init__(self, path: Path, space: list[bool]) -> None:
        super().__init__()
        self._path = path
        self._space = space
        path.touch()

    def flush(self) -> None:
        if self.closed:
            return
        if not self._space[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        with open(self._path, "a", encoding="utf-8") as f:
            f.write(self.getvalue())
        self.seek(0)
        self.truncate()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            super().close()


@pytest.fixture
def space(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    has_space = [True]

    def open_text(path: Any, mode: str = "r") -> io.StringIO:
        return _FullDisk(Path(path), has_space)

    monkeypatch.setattr(writer_mod, "open_text", open_text)
    return has_space


def test_a_disk_full_at_the_os_call_prunes_as_configured_and_leaves_no_empty_file(
    tmp_path: Path, space: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    rec = _recorder(tmp_path / "t.jsonl", clock, Rotation(max_size_bytes=4096, keep=3))
    _polls(rec, clock, 0, 40)
    space[0] = False
    _polls(rec, clock, 40, 400)  # 100 s full: ten tries at a new file, each removed
    assert not rec.writing
    assert len(list(tmp_path.iterdir())) <= 3
    assert 0 not in _sizes(tmp_path)
    assert _messages(caplog, STOPPED) == 1
    registry = CollectorRegistry()
    registry.register(RecordCollector(rec))
    text = generate_latest(registry).decode()
    assert "bubblewatch_record_writing 0.0" in text
    assert "bubblewatch_record_stops_total 1.0" in text
    assert f"bubblewatch_record_dropped_records_total {rec.stats.dropped_total:.1f}" in text
    assert rec.stats.dropped_total >= 8 * 300
    space[0] = True
    _polls(rec, clock, 440, 44)
    assert rec.writing
    rec.close()
    assert len(rotated_files(tmp_path / "t.jsonl")) <= 3
    assert "bubblewatch_record_writing 1.0" in generate_latest(registry).decode()


def test_without_rotation_recording_resumes_into_a_new_file_beside_the_first(
    tmp_path: Path, space: list[bool]
) -> None:
    clock = Clock()
    path = tmp_path / "t.jsonl"
    rec = _recorder(path, clock, Rotation())
    _polls(rec, clock, 0, 20)
    space[0] = False
    _polls(rec, clock, 20, 20)
    space[0] = True
    _polls(rec, clock, 40, 60)
    rec.close()
    assert read_trace(path).n_samples == 8 * 17  # flushed before the disk filled
    resumed = rotated_files(path)
    assert len(resumed) == 1 and read_trace(resumed[0]).n_samples > 0


def test_analyze_dir_skips_empty_parts_with_a_warning(
    tmp_path: Path, space: list[bool], capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    rec = _recorder(tmp_path / "t.jsonl", clock, Rotation(max_size_bytes=4096))
    _polls(rec, clock, 0, 80)
    rec.close()
    (tmp_path / "t-20250101T000000Z.jsonl").touch()  # what the old recorder left
    assert main(["analyze", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped_files"] == [
        {"path": str(tmp_path / "t-20250101T000000Z.jsonl"), "reason": "empty file"}
    ]
    assert out["n_samples"] > 0
    assert main(["analyze", str(tmp_path)]) == 0
    assert "skipped " + str(tmp_path / "t-20250101T000000Z.jsonl") + ": empty file" in (
        capsys.readouterr().out
    )


def test_a_directory_of_empty_files_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jsonl").touch()
    (tmp_path / "b.jsonl").touch()
    assert main(["analyze", str(tmp_path)]) == 2
    assert "every file is empty (2 of them" in capsys.readouterr().err
