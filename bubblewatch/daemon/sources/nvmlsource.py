"""The daemon's source over real GPUs: `NvmlSource` with what the daemon asks besides.

NVML itself is imported only when a daemon opens real GPUs (the simulator and
`--help` never load it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.samples import Event, LoadSample, Sample

if TYPE_CHECKING:
    from bubblewatch.daemon.sources.protocol import Played
    from bubblewatch.sources.nvml import NvmlSource
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

log = logging.getLogger("bubblewatch.daemon")


class NvmlDaemonSource:
    """Real GPUs through NVML: their pipelines are discovered, their engines polled."""

    simulated = False
    simulate_cpu_s = 0.0

    def __init__(self, nvml_source: NvmlSource) -> None:
        self.nvml_source = nvml_source

    # -- the sampling loop's Source --
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self.nvml_source.gpus()

    def interval_s(self, now_s: float) -> float:
        return self.nvml_source.interval_s(now_s)

    def poll(self, now_s: float) -> list[Sample]:
        return self.nvml_source.poll(now_s)

    def events(self) -> list[Event]:
        return self.nvml_source.events()

    def close(self) -> None:
        self.nvml_source.close()

    # -- what the daemon asks besides (daemon.sources.protocol) --
    def played(self) -> Played | None:
        return None

    def set_interval(self, interval_s: float) -> None:
        src = self.nvml_source
        src.config = replace(src.config, interval_s=interval_s)

    def burst(self, until_s: float) -> None:
        self.nvml_source.burst(until_s)

    def load(self, now_s: float) -> LoadSample | None:
        return None  # the engines' own metrics endpoints tell their load

    def switch(self, scenario: str) -> bool:
        return False

    def error_counts(self) -> Mapping[tuple[str, str], int]:
        return self.nvml_source.errors.snapshot()

    def interconnect(self) -> InterconnectProbe | None:
        from bubblewatch.sources.nvml.interconnect import InterconnectProbe

        return InterconnectProbe(self.nvml_source.nvml)

    def processes(self) -> dict[int, dict[int, int | None]]:
        """GPU index -> {PID: bytes it holds there (None: not reported)} of its compute
        processes, from NVML (absent where it cannot tell)."""
        from bubblewatch.sources.nvml import NvmlError

        nvml = self.nvml_source.nvml
        out: dict[int, dict[int, int | None]] = {}
        for info in self.gpus():
            try:
                h = nvml.handle(info.index)
                out[info.index] = dict(nvml.compute_processes(h))
            except NvmlError as e:
                log.info(
                    "no process list",
                    extra={
                        "kv": {"gpu": info.index, "error": str(e)},
                        "ratelimit_key": f"procs:{info.index}",
                    },
                )
        return out
