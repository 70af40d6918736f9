"""The sampling loop: ticks on `time.monotonic()` deadlines, never drifting."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from bubblewatch.model.samples import Event, Sample
from bubblewatch.sources.live import Source


def next_deadline(deadline_s: float, interval_s: float, now_s: float) -> float:
    """The first deadline after `now_s` on the grid deadline_s + k * interval_s (skips missed)."""
    nxt = deadline_s + interval_s
    if nxt <= now_s:
        nxt += math.ceil((now_s - nxt) / interval_s + 1e-9) * interval_s
    return nxt


def run(
    source: Source,
    *,
    duration_s: float | None,
    on_samples: Callable[[list[Sample]], None],
    on_events: Callable[[list[Event]], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll `source` until `duration_s` passes (None: until `should_stop`). Returns ticks done."""
    start = clock()
    end = math.inf if duration_s is None else start + duration_s
    deadline = start
    ticks = 0
    while not should_stop():
        now = clock()
        if now >= end:
            break
        on_samples(source.poll(now))
        ticks += 1
        if on_events is not None:
            events = source.events()
            if events:
                on_events(events)
        deadline = next_deadline(deadline, source.interval_s(now), clock())
        wait = min(deadline, end) - clock()
        if wait > 0:
            sleep(wait)
    return ticks
