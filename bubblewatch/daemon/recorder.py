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
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bubblewatch.daemon.recordconfig import Rotation
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.trace import TraceWriter

log = logging.getLogger("bubblewatch.recorder")

_STAMP = "%Y%m%dT%H%M%SZ"


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
        try:
            self._w, self._opened_s = self._open()
        except OSError as e:
            raise InputError(f"cannot write the trace: {e.strerror or e}", path=str(path)) from e
        self.current = Path(self._w.path)

    # -- what the sampler and the main loop call --
    def add(self, samples: Iterable[Sample]) -> int:
        n = 0
        with self._lock:
            self._rotate_if_due()
            for s in samples:
                self._guard(self._w.sample, s)
                n += 1
        return n

    def add_load(self, load: LoadSample) -> None:
        with self._lock:
            self._guard(self._w.load, load)

    def events(self, events: Iterable[Event]) -> None:
        with self._lock:
            for e in events:
                self._guard(self._w.event, e)

    def topology(self, t_s: float, topology: Topology | None) -> None:
        with self._lock:
            self._topology = topology  # every later file's header starts from it
            self._guard(self._w.topology, t_s, topology)

    def set_gpus(self, gpus: Iterable[GpuInfo]) -> None:
        """The GPUs the next file's header lists."""
        with self._lock:
            self._gpus = tuple(gpus)

    def flush(self) -> None:
        with self._lock:
            self._rotate_if_due()
            self._guard(self._w.flush)

    def close(self) -> None:
        with self._lock:
            self._guard(self._w.flush)
            self._w.close()
            self._closed = True

    # -- rotation --
    def _open(self) -> tuple[TraceWriter, float]:
        self._part += 1
        target = self._next_name() if self.rotation.enabled else self.path
        meta = dict(self._meta)
        if self.rotation.enabled:
            meta.update(part=self._part, started_s=round(self._wall(), 3))
        w = TraceWriter(
            target,
            gpus=self._gpus,
            topology=self._topology,
            meta=meta,
            flush_every=self._flush_every,
        )
        if self.rotation.enabled:
            w.flush()  # the header is on disk before any size is measured
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
                size = os.stat(self._w.path).st_size
            except OSError:
                return None
            if size >= r.max_size_bytes:
                return "size"
        return None

    def _rotate_if_due(self) -> None:
        if self._closed or not self.rotation.enabled:
            return
        reason = self._due()
        if reason is None:
            return
        old = self._w
        try:
            self._w, self._opened_s = self._open()
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
        old.close()
        self.current = Path(self._w.path)
        log.info(
            "trace file rotated",
            extra={"kv": {"reason": reason, "closed": old.path, "current": self._w.path}},
        )

    def _prune(self, *, keep_also: Path) -> None:
        keep = self.rotation.keep
        if keep <= 0:
            return
        files = [p for p in rotated_files(self.path) if p != keep_also]
        for p in files[: max(0, len(files) - (keep - 1))]:
            try:
                p.unlink()
            except OSError as e:
                log.warning(
                    "cannot delete an old trace file",
                    extra={"kv": {"path": str(p), "error": e.strerror or str(e)}},
                )

    def _guard(self, fn: Callable[..., object], *args: object) -> None:
        # A full disk must not stop sampling: log once per interval, keep going.
        if self._closed:
            return
        try:
            fn(*args)
        except (OSError, ValueError) as e:
            log.error(
                "trace write failed",
                extra={
                    "kv": {"path": str(self.path), "error": str(e)},
                    "ratelimit_key": f"trace:{self.path}",
                },
            )
