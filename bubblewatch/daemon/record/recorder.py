"""The optional trace recorder (`record.path`, `--record FILE`): everything sampled, as traces.

A thread-safe wrapper over `TraceWriter`: the sampler adds rows, the main
loop adds events and topology changes and flushes once per analysis; SIGTERM
flushes and closes, so a trace ends on a whole line.

With rotation (`record.max_size`, `record.max_age`) the recorder writes a
series of files `STEM-YYYYmmddTHHMMSSZ.SUFFIX` beside `path`, each a complete
trace: its header carries the GPUs and the topology in force when it starts.
A file is switched only when the sampler adds a poll's rows (or at a flush),
never inside a call: the rows of one poll land together in one file, with
the load read with them, each exactly once. The new file is opened
before the old one is closed, so a failure to open it (full disk) keeps the
old file going. Beyond `record.keep` files the oldest are deleted.

A write that fails (a full disk, a quota) stops the recording rather than
leaving a file per poll: the file being written is closed with what reached
the disk (complete lines stay readable; one holding no whole line is
removed), the failure is logged once, and the records offered meanwhile are
counted as dropped (`RecordStats`). Every `retry_s` the recorder prunes as
`record.keep` says and tries a new file (a rotated name, also without
rotation); a file it cannot start is removed at once. When one starts,
recording resumes and that is logged once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bubblewatch.daemon.config.record import Rotation
from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.trace import GZIP_MAGIC, TraceWriter

log = logging.getLogger("bubblewatch.recorder")

_STAMP = "%Y%m%dT%H%M%SZ"
# How often a stopped recorder (full disk) tries to start a new file.
RETRY_S = 10.0


def split_name(path: Path) -> tuple[str, str]:
    """('trace', '.jsonl.gz') for trace.jsonl.gz: the stem before the first dot, and the rest."""
    stem, dot, rest = path.name.partition(".")
    return stem, dot + rest


def rotated_files(path: Path) -> list[Path]:
    """The rotated files of `path` that exist, oldest first (by the start time in their name)."""
    stem, suffix = split_name(path)
    pattern = re.compile(rf"^{re.escape(stem)}-(\d{{8}}T\d{{6}}Z)(?:-(\d+))?{re.escape(suffix)}$")
    found: list[tuple[str, int, Path]] = []
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return []
    for p in entries:
        m = pattern.match(p.name)
        if m:
            found.append((m.group(1), int(m.group(2) or 0), p))
    return [p for _, _, p in sorted(found)]


class TraceRecorder:
    """Appends samples, load, events and topology changes to a trace file (or rotated files)."""

    def __init__(
        self,
        path: Path,
        gpus: Iterable[GpuInfo],
        topology: Topology | None,
        meta: dict[str, object],
        *,
        rotation: Rotation | None = None,
        flush_every: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        retry_s: float = RETRY_S,
    ) -> None:
        self.path = path
        self.rotation = rotation or Rotation()
        self._gpus = tuple(gpus)
        self._topology = topology
        self._meta: dict[str, Any] = {"host": socket.gethostname(), **meta}
        self._flush_every = flush_every
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._closed = False
        self._part = 0
        self._retry_s = retry_s
        self._retry_at = -math.inf  # no new file tried before this (monotonic)
        self.stats = RecordStats()
        try:
            w, self._opened_s = self._open()
        except OSError as e:
            raise InputError(f"cannot write the trace: {e.strerror or e}", path=str(path)) from e
        self._w: TraceWriter | None = w
        self.current = Path(w.path)

    # -- what the sampler and the main loop call --
    def add(self, samples: Iterable[Sample]) -> int:
        n = 0
        with self._lock:
            self._rotate_if_due()
            for s in samples:
                self._guard("sample", s)
                n += 1
        return n

    def add_load(self, load: LoadSample) -> None:
        with self._lock:
            self._guard("load", load)

    def events(self, events: Iterable[Event]) -> None:
        with self._lock:
            for e in events:
                self._guard("event", e)

    def topology(self, t_s: float, topology: Topology | None) -> None:
        with self._lock:
            self._topology = topology  # every later file's header starts from it
            self._guard("topology", t_s, topology)

    def set_gpus(self, gpus: Iterable[GpuInfo]) -> None:
        """The GPUs the next file's header lists."""
        with self._lock:
            self._gpus = tuple(gpus)

    def flush(self) -> None:
        with self._lock:
            self._rotate_if_due()
            self._guard("flush")

    def close(self) -> None:
        with self._lock:
            self._guard("flush")
            if self._w is not None:
                _close_quietly(self._w)
            self._closed = True

    @property
    def writing(self) -> bool:
        """False while a failed write (a full disk) has stopped the recording."""
        return self._w is not None

    # -- rotation --
    def _open(self, *, resume: bool = False) -> tuple[TraceWriter, float]:
        self._part += 1
        # Resumed without rotation: a new file beside `path` (rewriting it would lose it).
        target = self._next_name() if self.rotation.enabled or resume else self.path
        meta = dict(self._meta)
        if self.rotation.enabled or resume:
            meta.update(part=self._part, started_s=round(self._wall(), 3))
        w: TraceWriter | None = None
        try:
            w = TraceWriter(
                target,
                gpus=self._gpus,
                topology=self._topology,
                meta=meta,
                flush_every=self._flush_every,
            )
            w.flush()  # the header is on disk before any size is measured
        except OSError:
            if w is not None:
                _close_quietly(w)
            _remove_if_headless(target)  # never a file per failed try
            raise
        opened = self._clock()
        self._prune(keep_also=target)
        return w, opened

    def _next_name(self) -> Path:
        stem, suffix = split_name(self.path)
        stamp = datetime.fromtimestamp(self._wall(), tz=timezone.utc).strftime(_STAMP)
        candidate = self.path.with_name(f"{stem}-{stamp}{suffix}")
        n = 0
        while candidate.exists():  # two files started within one second
            n += 1
            candidate = self.path.with_name(f"{stem}-{stamp}-{n}{suffix}")
        return candidate

    def _due(self) -> str | None:
        r = self.rotation
        if r.max_age_s > 0 and self._clock() - self._opened_s >= r.max_age_s:
            return "age"
        if r.max_size_bytes > 0:
            try:
                size = os.stat(self.current).st_size
            except OSError:
                return None
            if size >= r.max_size_bytes:
                return "size"
        return None

    def _rotate_if_due(self) -> None:
        if self._closed:
            return
        if self._w is None:
            self._resume()
            return
        if not self.rotation.enabled:
            return
        reason = self._due()
        if reason is None:
            return
        old = self._w
        try:
            new, self._opened_s = self._open()
        except OSError as e:
            self._part -= 1
            log.error(
                "cannot start a new trace file; still writing the current one",
                extra={
                    "kv": {"path": old.path, "error": e.strerror or str(e)},
                    "ratelimit_key": f"trace-rotate:{self.path}",
                },
            )
            return
        try:
            old.flush()
        except (OSError, ValueError) as e:
            log.error("trace write failed", extra={"kv": {"path": old.path, "error": str(e)}})
        _close_quietly(old)
        self._w = new
        self.current = Path(new.path)
        log.info(
            "trace file rotated",
            extra={"kv": {"reason": reason, "closed": old.path, "current": new.path}},
        )

    def _resume(self) -> None:
        """Stopped by a failed write: prune, then try a new file every `retry_s`."""
        if self._clock() < self._retry_at:
            return
        self._retry_at = self._clock() + self._retry_s
        self._prune(keep_also=None)
        try:
            w, self._opened_s = self._open(resume=True)
        except OSError:
            self._part -= 1
            return
        self._w = w
        self.current = Path(w.path)
        dropped = self.stats.resumed()
        log.warning(
            "trace recording resumed",
            extra={"kv": {"current": w.path, "records_dropped": dropped}},
        )

    def _stop(self, e: OSError) -> None:
        """A write failed: close the file with what reached the disk and stop, said once."""
        w = self._w
        if w is None:
            return
        self._w = None
        _close_quietly(w)
        _remove_if_headless(Path(w.path))
        self._retry_at = self._clock() + self._retry_s
        self.stats.stopped()
        log.error(
            "trace recording stopped: cannot write; the files so far stay readable, "
            f"a new file is tried every {self._retry_s:g} s",
            extra={"kv": {"path": w.path, "error": e.strerror or str(e)}},
        )

    def _prune(self, *, keep_also: Path | None) -> None:
        keep = self.rotation.keep
        if keep <= 0:
            return
        # Room for one more beside `keep_also` (or for the file about to be started).
        files = [p for p in rotated_files(self.path) if p != keep_also]
        for p in files[: max(0, len(files) - (keep - 1))]:
            try:
                p.unlink()
            except OSError as e:
                log.warning(
                    "cannot delete an old trace file",
                    extra={"kv": {"path": str(p), "error": e.strerror or str(e)}},
                )

    def _guard(self, method: str, *args: object) -> None:
        # A full disk must not stop sampling: stop recording (said once), keep going.
        if self._closed:
            return
        if self._w is None:
            if method != "flush":
                self.stats.dropped()
            return
        try:
            getattr(self._w, method)(*args)
        except OSError as e:
            self._stop(e)
        except ValueError as e:
            log.error(
                "trace write failed",
                extra={
                    "kv": {"path": str(self.path), "error": str(e)},
                    "ratelimit_key": f"trace:{self.path}",
                },
            )


class RecordStats:
    """What the recorder could not write: stops (a failed write), records dropped meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stops = 0
        self.dropped_total = 0
        self._dropped_now = 0

    def stopped(self) -> None:
        with self._lock:
            self.stops += 1
            self._dropped_now = 0

    def dropped(self) -> None:
        with self._lock:
            self.dropped_total += 1
            self._dropped_now += 1

    def resumed(self) -> int:
        """The records dropped since the stop."""
        with self._lock:
            n, self._dropped_now = self._dropped_now, 0
            return n


def _close_quietly(w: TraceWriter) -> None:
    """Close `w`; on a full disk the flush fails, but the file is closed all the same."""
    with contextlib.suppress(OSError, ValueError):
        w.close()


def _remove_if_headless(path: Path) -> None:
    """Delete a file a failed write left without one whole line (no header to read it by)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        if head[:2] == GZIP_MAGIC:
            head = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(head, 1 << 16)
        if b"\n" not in head:
            path.unlink()
    except (OSError, zlib.error):
        pass
