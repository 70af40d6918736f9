"""A fake clock and a fake source, so the daemon's loop runs in-process without real time passing.

`FakeClock` moves time only in the main loop's sleep, and only once the
sampler thread sleeps too: every poll due before the main loop wakes has
run by then, so a test sees the same ticks on every run. Things scheduled
with `at` (signals for the loop, actions on the fake world) happen at their
fake instant.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bubblewatch.daemon.loop.ticks import Wakeup
from bubblewatch.daemon.sources.protocol import Played
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

WALL0 = 1_700_000_000.0  # the fake wall clock at monotonic 0
SETTLE_S = 10.0  # real seconds the main loop waits for the sampler thread to go to sleep


@dataclass(order=True)
class _Due:
    t_s: float
    seq: int
    signum: int | None = field(default=None, compare=False)
    action: Callable[[], None] | None = field(default=None, compare=False)


class FakeClock:
    """Monotonic and wall time that move only when the daemon's threads sleep."""

    def __init__(self, *, workers: int = 1, wall0_s: float = WALL0) -> None:
        self._now = 0.0
        self._wall0 = wall0_s
        self._cond = threading.Condition()
        self._sleepers: dict[int, float] = {}
        self._due: list[_Due] = []
        self.workers = workers  # threads besides the main loop that sleep on this clock
        self.sleeps = 0  # main-loop sleeps, so a test can tell the loop ran

    def monotonic(self) -> float:
        with self._cond:
            return self._now

    def time(self) -> float:
        return self.monotonic() + self._wall0

    def at(
        self, t_s: float, *, signum: int | None = None, action: Callable[[], None] | None = None
    ) -> None:
        """At monotonic `t_s`: hand `signum` to the main loop, or run `action` (in the loop)."""
        with self._cond:
            self._due.append(_Due(t_s, len(self._due), signum, action))
            self._due.sort()

    def sleep_until(self, deadline_s: float, stop: threading.Event) -> None:
        me = threading.get_ident()
        with self._cond:
            self._sleepers[me] = deadline_s
            self._cond.notify_all()
            while self._now < deadline_s and not stop.is_set():
                self._cond.wait(0.01)  # stop.set() does not notify this condition
            del self._sleepers[me]
            self._cond.notify_all()

    def sleep(self, timeout_s: float, wake: Wakeup) -> list[int]:
        signals: list[int] = []
        with self._cond:
            self.sleeps += 1
            target = self._now + max(0.0, timeout_s)
            while True:
                self._settle()
                while self._due and self._due[0].t_s <= self._now:
                    due = self._due.pop(0)
                    if due.action is not None:
                        due.action()
                    if due.signum is not None:
                        signals.append(due.signum)
                if signals or self._now >= target:
                    break
                later = [d for d in self._sleepers.values() if d > self._now]
                later += [d.t_s for d in self._due]
                self._now = min([target, *later])
                self._cond.notify_all()
        return signals + wake.wait(0.0)  # nudges (and any real signal) that came meanwhile

    def _settle(self) -> None:
        """Wait (in real time) until every worker sleeps past now: its due ticks have run."""
        self._cond.wait_for(
            lambda: sum(d > self._now for d in self._sleepers.values()) >= self.workers,
            timeout=SETTLE_S,
        )


BUSY = {
    Metric.POWER_AVG_W: 520.0,
    Metric.POWER_INSTANT_W: 520.0,
    Metric.SM_ACTIVE_RATIO: 0.9,
    Metric.SM_OCCUPANCY_RATIO: 0.5,
    Metric.KERNEL_BUSY_RATIO: 1.0,
    Metric.SM_CLOCK_MHZ: 1980.0,
    Metric.TEMPERATURE_C: 60.0,
}
IDLE = {
    **{m: 0.0 for m in BUSY},
    Metric.POWER_AVG_W: 60.0,
    Metric.POWER_INSTANT_W: 60.0,
    Metric.SM_CLOCK_MHZ: 345.0,
    Metric.CLOCKS_EVENT_REASONS: 1.0,  # GpuIdle
    Metric.TEMPERATURE_C: 35.0,
}


def busy(gpu: int, t_s: float) -> Mapping[Metric, float]:
    """Readings of a GPU computing flat out."""
    return BUSY


def idle(gpu: int, t_s: float) -> Mapping[Metric, float]:
    """Readings of a GPU that has nothing to do."""
    return IDLE


Readings = Callable[[int, float], Mapping[Metric, float]]


class FakeSource:
    """GPUs in one pipeline whose readings a test chooses (and may change or lose).

    Played as a simulator plays (its pipeline given, no engine to poll), or with
    `simulated=False` as live GPUs whose pipelines are discovered.
    """

    simulate_cpu_s = 0.0

    def __init__(
        self,
        clock: FakeClock,
        *,
        n_gpus: int = 2,
        readings: Readings = busy,
        interval_s: float = 1.0,
        simulated: bool = True,
    ) -> None:
        self._clock = clock
        self.simulated = simulated
        self._gpus = tuple(
            GpuInfo(index=i, uuid=f"GPU-fake-{i}", name="Fake GPU", power_limit_w=600.0)
            for i in range(n_gpus)
        )
        self.readings = readings
        self.interval = interval_s
        self.lost: set[int] = set()
        self.polls: list[float] = []  # monotonic time of each poll
        self.closed = False
        self._events: list[Event] = []
        self._lock = threading.Lock()
        argv = ("python", "-m", "sglang.launch_server", "--model-path", "m")
        self._played = Played(
            (Topology(tuple((g,) for g in range(n_gpus)), engine="sglang", source="sim"),),
            (*argv, "--pp-size", str(n_gpus), "--port", "30000"),
        )

    def lose(self, gpu: int) -> None:
        """The GPU falls off the bus: no more readings, and a `gpu_lost` event (as NVML says)."""
        with self._lock:
            self.lost.add(gpu)
            self._events.append(Event(self._clock.time(), "gpu_lost", gpu, {"code": 15}))

    # -- Source --
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self._gpus

    def interval_s(self, now_s: float) -> float:
        return self.interval

    def poll(self, now_s: float) -> list[Sample]:
        t = self._clock.time()
        with self._lock:
            self.polls.append(now_s)
            live = [g.index for g in self._gpus if g.index not in self.lost]
        return [Sample(t, g, dict(self.readings(g, t))) for g in live]

    def events(self) -> list[Event]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def close(self) -> None:
        self.closed = True

    # -- DaemonSource --
    def played(self) -> Played | None:
        return self._played if self.simulated else None

    def set_interval(self, interval_s: float) -> None:
        self.interval = interval_s

    def burst(self, until_s: float) -> None:
        pass

    def load(self, now_s: float) -> LoadSample | None:
        return LoadSample(self._clock.time(), 8.0, 0.0)

    def processes(self) -> dict[int, list[int]]:
        return {}

    def interconnect(self) -> InterconnectProbe | None:
        return None

    def switch(self, scenario: str) -> bool:
        return False

    def error_counts(self) -> Mapping[tuple[str, str], int]:
        return {}
