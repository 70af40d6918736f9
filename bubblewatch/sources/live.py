"""The interface of a live telemetry source, as the sampling loop and the daemon drive it."""

from __future__ import annotations

from typing import Protocol

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.samples import Event, Sample


class Source(Protocol):
    """Something that samples GPUs when asked; the caller owns the clock and the schedule."""

    def gpus(self) -> tuple[GpuInfo, ...]:
        """The GPUs this source reports on."""
        ...

    def interval_s(self, now_s: float) -> float:
        """Seconds until the next poll should happen, given monotonic time `now_s`."""
        ...

    def poll(self, now_s: float) -> list[Sample]:
        """Read what is due at monotonic time `now_s`; rows carry wall-clock timestamps."""
        ...

    def events(self) -> list[Event]:
        """Events seen since the last call (Xid errors, GPUs lost or recovered)."""
        ...

    def close(self) -> None: ...
