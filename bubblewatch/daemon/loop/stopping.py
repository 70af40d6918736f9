"""Stopping the daemon: every thread and file it opened closed, in order, once.

`close` is for a daemon opened but never run; `_shutdown` ends a run (SIGTERM,
SIGINT, or the sampler's death): stop the pollers and the sampler, close the
endpoint, give alerts in flight `SHUTDOWN_ALERT_TIMEOUT_S`, close the trace
and the source, and log what the run cost.
"""

from __future__ import annotations

import logging

from bubblewatch.daemon.loop.state import SHUTDOWN_ALERT_TIMEOUT_S, DaemonState

log = logging.getLogger("bubblewatch.daemon")


class Shutdown(DaemonState):
    """Closing what `Daemon` opened."""

    def close(self) -> None:
        """Close what opening the daemon opened, for a daemon that is not going to run."""
        self.server.close()
        self._close_opened()

    def _close_opened(self) -> None:
        for closer in (self.loads, self.states):
            if closer is not None:
                closer.close()
        if self.recorder is not None:
            self.recorder.close()
        self.dispatcher.close(SHUTDOWN_ALERT_TIMEOUT_S)
        self.wake.close()
        self.source.close()

    # -- SIGTERM --
    def _shutdown(self) -> None:
        self.notifier.stopping()
        if self.loads is not None:
            self.loads.close()
        if self.states is not None:
            self.states.close()
        self.sampler.stop()
        self.server.close()
        self.dispatcher.close(SHUTDOWN_ALERT_TIMEOUT_S)
        if self.recorder is not None:
            self.recorder.close()
        self.source.close()
        self.wake.close()
        st = self.sampler.stats()
        log.info(
            "stopped",
            extra={
                "kv": {
                    "polls": st.polls,
                    "samples": st.samples,
                    "source_cpu_s": f"{st.source_cpu_s:.4f}",
                    "simulate_cpu_s": f"{self.source.simulate_cpu_s:.4f}",
                    "ring_bytes": self.ring.stats().nbytes,
                }
            },
        )
        self.notifier.close()
