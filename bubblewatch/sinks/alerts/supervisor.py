"""A thread that starts a receiver's delivery thread again should it ever end."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from bubblewatch.sinks.alerts.worker import DeliveryWorker

# How often the supervisor looks; a dead worker loses no alert meanwhile (they wait on disk).
SUPERVISE_INTERVAL_S = 1.0


class WorkerSupervisor:
    """Calls `ensure_alive` on every worker each `interval_s` until `close`."""

    def __init__(
        self, workers: Sequence[DeliveryWorker], interval_s: float = SUPERVISE_INTERVAL_S
    ) -> None:
        self._workers = tuple(workers)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="bubblewatch-deliver-supervisor", daemon=True
        )

    def start(self) -> None:
        if self._workers:
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._interval_s + 1.0)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            for w in self._workers:
                w.ensure_alive()
