"""What the daemon asks of its source: wide enough that no caller checks which source it is.

`bubblewatch.sources.live.Source` is what the sampling loop drives (GPUs,
polls, events). The daemon asks more: the simulator plays its own pipelines
and engine load and can switch scenario; NVML lists each GPU's processes,
probes the stage links and counts its errors. Each adapter answers every
question (`simsource.SimSource`, `nvmlsource.NvmlDaemonSource`), with the
neutral answer where it has nothing to say, so the loop never asks what it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from bubblewatch.model.samples import LoadSample
from bubblewatch.model.topology import Topology
from bubblewatch.sources.live import Source

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe


@dataclass(frozen=True)
class Played:
    """The pipelines a simulated source plays: their topologies and the engine's argv."""

    topologies: tuple[Topology, ...]
    engine_argv: tuple[str, ...]


class DaemonSource(Source, Protocol):
    """A `Source` with everything the daemon's loop, discovery, reload and exporter ask."""

    @property
    def simulated(self) -> bool:
        """True when the GPUs are simulated: no engine endpoints to poll, scenarios to switch."""
        ...

    @property
    def simulate_cpu_s(self) -> float:
        """CPU seconds spent simulating ahead of the polls (0 on real GPUs)."""
        ...

    def played(self) -> Played | None:
        """The simulated pipelines; None on real GPUs, whose pipelines are discovered."""
        ...

    def set_interval(self, interval_s: float) -> None:
        """Poll every `interval_s` from now on."""
        ...

    def burst(self, until_s: float) -> None:
        """Sample faster until monotonic `until_s` where the source can (the detector is unsure)."""
        ...

    def load(self, now_s: float) -> LoadSample | None:
        """The engine load the source knows itself (the simulator's); None: poll the engines."""
        ...

    def processes(self) -> dict[int, dict[int, int | None]]:
        """GPU index -> {PID: bytes it holds there (None: not reported)} of its compute
        processes (empty where the source cannot tell)."""
        ...

    def interconnect(self) -> InterconnectProbe | None:
        """A probe of the links between GPUs, where the source can read them."""
        ...

    def switch(self, scenario: str) -> bool:
        """Play `scenario` from the next poll on; False where the source plays none."""
        ...

    def error_counts(self) -> Mapping[tuple[str, str], int]:
        """Errors by (call, reason) so far, for the exporter (empty where none are counted)."""
        ...
