"""The optional trace recorder (`--record FILE`): everything sampled, as a bubblewatch trace.

A thin, thread-safe wrapper over `TraceWriter`: the sampler adds rows, the
main loop adds topology changes and flushes once per analysis; SIGTERM
flushes and closes it, so a trace ends on a whole line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.trace import TraceWriter

log = logging.getLogger("bubblewatch.recorder")


class TraceRecorder:
    """Appends samples, load, events and topology changes to a trace file."""

    def __init__(
        self,
        path: Path,
        gpus: Iterable[GpuInfo],
        topology: Topology | None,
        meta: dict[str, object],
        *,
        flush_every: int = 4096,
    ) -> None:
        try:
            self._w = TraceWriter(
                path, gpus=tuple(gpus), topology=topology, meta=meta, flush_every=flush_every
            )
        except OSError as e:
            raise InputError(f"cannot write the trace: {e.strerror or e}", path=str(path)) from e
        self.path = path
        self._lock = threading.Lock()
        self._closed = False

    def add(self, samples: Iterable[Sample]) -> int:
        n = 0
        with self._lock:
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
            self._guard(self._w.topology, t_s, topology)

    def flush(self) -> None:
        with self._lock:
            self._guard(self._w.flush)

    def close(self) -> None:
        with self._lock:
            self._guard(self._w.flush)
            self._w.close()
            self._closed = True

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
