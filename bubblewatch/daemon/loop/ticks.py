"""The daemon's clocks: the sampling thread, periodic deadlines and the main loop's wake-up.

The sampler polls its source on `time.monotonic()` deadlines (never
accumulating `sleep(interval)` drift; a late tick skips missed deadlines),
writes into the ring buffer, and pings the systemd watchdog, so a hung
sampler stops the pings and systemd restarts the service (the pings also stop
while the main loop's `Heartbeat` is stale). The main thread
sleeps in `Wakeup.wait` until its next deadline, a signal, or a nudge from
the sampler; signal handlers only write a byte (signal.set_wakeup_fd).

Every reading of the time and every sleep goes through a `Clock`
(`SystemClock` in production), so tests run the whole loop on a fake one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.sources.live import Source
from bubblewatch.sources.nvml.loop import next_deadline

log = logging.getLogger("bubblewatch.sampler")

_NUDGE = b"\0"  # a thread's wake-up byte; signals write their own number


class Sink(Protocol):
    """Something the sampler hands each tick's rows to (the ring, a trace recorder)."""

    def add(self, samples: Iterable[Sample]) -> int: ...

    def add_load(self, load: LoadSample) -> None: ...


class LoadSource(Protocol):
    def load(self, now_s: float) -> LoadSample | None: ...


class Clock(Protocol):
    """The daemon's time: monotonic and wall clocks, and how its threads sleep."""

    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Seconds since the Unix epoch (the samples' timestamps)."""
        ...

    def sleep_until(self, deadline_s: float, stop: threading.Event) -> None:
        """A worker's sleep: until monotonic `deadline_s`, or sooner once `stop` is set."""
        ...

    def sleep(self, timeout_s: float, wake: Wakeup) -> list[int]:
        """The main loop's sleep: up to `timeout_s` or a wake-up; the signals that arrived."""
        ...


class SystemClock:
    """The host's clocks; sleeping really waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep_until(self, deadline_s: float, stop: threading.Event) -> None:
        stop.wait(max(0.0, deadline_s - time.monotonic()))

    def sleep(self, timeout_s: float, wake: Wakeup) -> list[int]:
        return wake.wait(timeout_s)


class Every:
    """A periodic deadline on the monotonic clock: `due(now)` once per `interval_s`."""

    def __init__(self, interval_s: float, first_s: float) -> None:
        self.interval_s = interval_s
        self.next_s = first_s

    def due(self, now_s: float) -> bool:
        if now_s < self.next_s:
            return False
        self.next_s = next_deadline(self.next_s, self.interval_s, now_s)
        return True

    def reschedule(self, interval_s: float, now_s: float) -> None:
        self.interval_s = interval_s
        self.next_s = min(self.next_s, now_s + interval_s)

    def now(self, now_s: float) -> None:
        """Make it due at once (e.g. rediscover after a scenario change)."""
        self.next_s = now_s


class Wakeup:
    """A socketpair the main loop sleeps on: signals (via set_wakeup_fd) and threads wake it."""

    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._old_fd: int | None = None
        self._old_handlers: dict[int, Any] = {}

    def install_signals(self, signums: Iterable[int]) -> None:
        """Route `signums` here; their Python handlers do nothing, the loop reads the numbers."""
        for s in signums:
            self._old_handlers[s] = signal.signal(s, _noop_handler)
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)

    def nudge(self) -> None:
        """Wake the main loop from another thread."""
        with contextlib.suppress(BlockingIOError, OSError):
            self._w.send(_NUDGE)

    def wait(self, timeout_s: float) -> list[int]:
        """Sleep up to `timeout_s`; returns the signal numbers that arrived (nudges are 0)."""
        ready, _, _ = select.select([self._r], [], [], max(0.0, timeout_s))
        if not ready:
            return []
        out: list[int] = []
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                data = self._r.recv(4096)
                if not data:
                    break
                out.extend(b for b in data if b != 0)
        return out

    def close(self) -> None:
        """Give the signals back as they were (a daemon run in-process leaves no trace)."""
        if self._old_fd is not None:
            signal.set_wakeup_fd(self._old_fd)
            self._old_fd = None
        for s, handler in self._old_handlers.items():
            signal.signal(s, handler)
        self._old_handlers.clear()
        self._r.close()
        self._w.close()


def _noop_handler(signum: int, frame: object) -> None:
    """The work happens in the main loop; set_wakeup_fd already carried the signal number."""


class Heartbeat:
    """The main loop's sign of life, so the sampler's watchdog pings stop when it wedges.

    The sampler thread pings systemd's watchdog; were that all, a main loop
    stuck in an analysis, a discovery or a reload would go unnoticed while
    sampling went on. `gate(ping, max_age_s)` pings only while the main loop
    has beaten within `max_age_s`.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_s = clock()

    def beat(self) -> None:
        self._last_s = self._clock()

    def age_s(self) -> float:
        return self._clock() - self._last_s

    def gate(self, ping: Callable[[], object], max_age_s: float) -> Callable[[], object]:
        def gated() -> object:
            if self.age_s() > max_age_s:
                log.error(
                    "main loop stalled; withholding the watchdog ping",
                    extra={"kv": {"stalled_s": f"{self.age_s():.1f}"},
                           "ratelimit_key": "main-loop-stalled"},
                )  # fmt: skip
                return False
            return ping()

        return gated


@dataclass(frozen=True)
class SamplerStats:
    polls: int
    samples: int
    errors: int
    last_sample_wall_s: float | None
    last_poll_duration_s: float | None
    source_cpu_s: float  # thread CPU time spent inside source.poll()


class Sampler:
    """Polls `source` on monotonic deadlines in its own thread and feeds the sinks."""

    def __init__(
        self,
        source: Source,
        sinks: Iterable[Sink],
        *,
        load: LoadSource | None = None,
        on_events: Callable[[list[Event]], None] | None = None,
        on_first_sample: Callable[[], None] | None = None,
        watchdog: Callable[[], object] | None = None,
        watchdog_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep_until: Callable[[float, threading.Event], None] | None = None,
    ) -> None:
        self.source = source
        self._sinks = list(sinks)
        self._load = load
        self._on_events = on_events
        self._on_first = on_first_sample
        self._watchdog = watchdog
        # Ping at a quarter of systemd's WatchdogSec: three missed ticks still keep us alive.
        self._watchdog_every_s = None if watchdog_interval_s is None else watchdog_interval_s / 4
        self._last_ping = -math.inf
        self._clock = clock
        self._sleep_until = sleep_until or self._wait_on_clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latest: dict[int, dict[Metric, float]] = {}
        self._polls = self._samples = self._errors = 0
        self._last_wall: float | None = None
        self._last_dur: float | None = None
        self._cpu_s = 0.0
        self._thread = threading.Thread(target=self._run, name="bubblewatch-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def latest(self) -> dict[int, dict[Metric, float]]:
        """Each GPU's last finite value of every metric (a copy), for the exporter."""
        with self._lock:
            return {g: dict(v) for g, v in self._latest.items()}

    def gpus(self) -> tuple[GpuInfo, ...]:
        return self.source.gpus()

    def stats(self) -> SamplerStats:
        with self._lock:
            return SamplerStats(
                self._polls,
                self._samples,
                self._errors,
                self._last_wall,
                self._last_dur,
                self._cpu_s,
            )

    def _run(self) -> None:
        deadline = self._clock()
        while not self._stop.is_set():
            self._tick(self._clock())
            now = self._clock()
            deadline = next_deadline(deadline, self.source.interval_s(now), now)
            self._sleep_until(deadline, self._stop)

    def _wait_on_clock(self, deadline_s: float, stop: threading.Event) -> None:
        stop.wait(max(0.0, deadline_s - self._clock()))

    def _tick(self, now_s: float) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            rows = self.source.poll(now_s)
            load = self._load.load(now_s) if self._load is not None else None
            events = self.source.events()
        except Exception as e:  # a broken source must not kill the sampler thread
            with self._lock:
                self._errors += 1
            log.error(
                "sampling failed",
                exc_info=log.isEnabledFor(logging.DEBUG),
                extra={
                    "kv": {"error": f"{type(e).__name__}: {e}"},
                    "ratelimit_key": f"sample:{type(e).__name__}",
                },
            )
            self._ping(now_s)
            return
        dur = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        for sink in self._sinks:
            try:
                sink.add(rows)
                if load is not None:
                    sink.add_load(load)
            except Exception as e:
                log.error(
                    "storing samples failed",
                    extra={
                        "kv": {"sink": type(sink).__name__, "error": f"{type(e).__name__}: {e}"},
                        "ratelimit_key": f"sink:{type(sink).__name__}",
                    },
                )
        first = False
        with self._lock:
            self._polls += 1
            self._cpu_s += cpu
            self._last_dur = dur
            if rows:
                first = self._samples == 0
                self._samples += len(rows)
                self._last_wall = max(r.t_s for r in rows)
                for r in rows:
                    latest = self._latest.setdefault(r.gpu, {})
                    latest.update(r.values)
        if events and self._on_events is not None:
            self._on_events(events)
        if first and self._on_first is not None:
            self._on_first()
        self._ping(now_s)

    def _ping(self, now_s: float) -> None:
        if self._watchdog is None or self._watchdog_every_s is None:
            return
        if now_s - self._last_ping >= self._watchdog_every_s:
            self._last_ping = now_s
            self._watchdog()
