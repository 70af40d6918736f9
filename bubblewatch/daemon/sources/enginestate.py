"""Each discovered engine's live settings, read back off the main thread, and their changes.

One worker thread reads every engine that serves its settings (SGLang
`/server_info`, bubblewatch.sources.engine_state) every `interval_s`, at once
when discovery pokes it (every rediscovery, and so after an engine restart),
and again right after it sees a value change, to confirm it: a change the
operator made live (`POST /set_internal_state`) is a changed read-back.
bubblewatch changes nothing itself. The main thread takes the newest state
(`latest`, joined into the facts) and the confirmed changes (`take_changes`)
without waiting on the network.

The API key, when the engine needs one, comes from the environment
(`BUBBLEWATCH_ENGINE_API_KEY`, or a file named by
`BUBBLEWATCH_ENGINE_API_KEY_FILE`, e.g. a systemd credential), never from the
engine's command line; it goes only to the engine's own address.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bubblewatch.daemon.pipelines.analyzer import Pipeline
from bubblewatch.daemon.pipelines.discovery import settings
from bubblewatch.sources.engine_state import (
    LIVE_SETTINGS,
    EngineStateReader,
    LiveState,
    UpdateResult,
    judge_update,
    state_paths,
)
from bubblewatch.topology.endpoint import base_url
from bubblewatch.topology.engine_config import EngineConfig

log = logging.getLogger("bubblewatch.engine")

__all__ = ["EngineStates", "LiveChange"]

DEFAULT_INTERVAL_S = 10.0


@dataclass(frozen=True)
class LiveChange:
    """A live setting that changed without a restart, confirmed by a second read-back."""

    pipeline: str
    t_s: float
    settings: Mapping[str, tuple[object, object]]
    result: UpdateResult
    version: str | None

    def log_fields(self) -> dict[str, object]:
        return {
            "pipeline": self.pipeline,
            "changed": ",".join(f"{k}={a}->{b}" for k, (a, b) in sorted(self.settings.items())),
            "result": self.result.status,
            "why": self.result.why,
            "version": self.version or "unknown",
        }


@dataclass
class _Engine:
    reader: EngineStateReader
    key: tuple[object, ...]  # address, release and start-up settings: a restart is a new one
    latest: LiveState | None = None
    # A change seen once, waiting for the next read to confirm it: the settings before.
    unconfirmed: dict[str, int] | None = None


class EngineStates:
    """Live-settings readers for the pipelines' engines, updated with discovery."""

    def __init__(
        self,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 1.0,
        api_key: str | None = None,
        stale_after_s: float | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        # A read-back older than a few reads (the engine stopped answering) says nothing of now.
        self.stale_after_s = (
            stale_after_s if stale_after_s is not None else 3 * interval_s + timeout_s
        )
        self._key = api_key
        self._lock = threading.Lock()
        self._engines: dict[str, _Engine] = {}
        self._changes: list[LiveChange] = []
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, pipelines: Sequence[Pipeline]) -> None:
        """Read exactly these pipelines' engines, all of them at once (a rediscovery)."""
        wanted: dict[str, tuple[str, EngineConfig]] = {}
        for p in pipelines:
            e = p.engine
            url = None if e is None else base_url(e)
            if e is not None and url is not None and state_paths(e.name, e.version):
                wanted[p.id] = (url, e)
        with self._lock:
            for pid in [pid for pid in self._engines if pid not in wanted]:
                del self._engines[pid]
            for pid, (url, e) in wanted.items():
                key = (url, *sorted(settings(e).items(), key=lambda kv: kv[0]))
                old = self._engines.get(pid)
                if old is None or old.key != key:
                    reader = EngineStateReader(
                        url, engine=e.name, version=e.version, api_key=self._key,
                        timeout_s=self.timeout_s,
                    )  # fmt: skip
                    self._engines[pid] = _Engine(reader, key)
        if self._thread is None and wanted:
            self._thread = threading.Thread(
                target=self._run, name="bubblewatch-engine-state", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def latest(self, pipeline_id: str, now_s: float | None = None) -> LiveState | None:
        """The newest read-back; None when there is none or (given `now_s`) it is stale."""
        with self._lock:
            e = self._engines.get(pipeline_id)
            last = None if e is None else e.latest
        if last is None or (now_s is not None and now_s - last.t_s > self.stale_after_s):
            return None
        return last

    def take_changes(self) -> list[LiveChange]:
        """The confirmed live changes since the last call, oldest first."""
        with self._lock:
            out, self._changes = self._changes, []
        return out

    def counts(self) -> dict[tuple[str, str, str], int]:
        """{(pipeline, setting, result): live changes seen}."""
        with self._lock:
            return dict(self._counts)

    def read_now(self) -> None:
        """Read every engine once, on the caller's thread (the worker does this in the daemon)."""
        with self._lock:
            engines = list(self._engines.items())
        for pid, e in engines:
            reading = e.reader.read()
            if reading.state is not None:
                self._take(pid, e, reading.state)

    def _take(self, pid: str, e: _Engine, state: LiveState) -> None:
        now = {k: v for k, v in state.settings.items() if k in LIVE_SETTINGS}
        again = False
        with self._lock:
            prev, e.latest = e.latest, state
            if e.unconfirmed is not None:
                old, e.unconfirmed = e.unconfirmed, None
                if now != old:
                    diff = {k: (old.get(k), now.get(k)) for k in now.keys() | old.keys()
                            if old.get(k) != now.get(k)}  # fmt: skip
                    asked = {(state.cap_key or k) if k == "pp_max_micro_batch_size" else k: v
                             for k, (_, v) in diff.items() if v is not None}  # fmt: skip
                    result = judge_update(asked, version=state.version, after=state)
                    change = LiveChange(pid, state.t_s, diff, result, state.version)
                    self._changes.append(change)
                    for k in diff:
                        self._counts[(pid, k, result.status)] += 1
            elif prev is not None:
                before = {k: v for k, v in prev.settings.items() if k in LIVE_SETTINGS}
                if now != before:
                    e.unconfirmed, again = before, True
        if again:
            self._wake.set()  # read back at once to confirm

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.read_now()
            except Exception:  # never let the reader thread die silently
                log.exception("reading engine settings failed")
            self._wake.wait(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1.0)
