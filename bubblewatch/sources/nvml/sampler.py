"""The NVML source: every GPU's reader, base and burst rates, lost GPUs, Xid events.

`poll(now)` does one tick at an explicit monotonic time, so tests drive it
without sleeping; `bubblewatch.sources.nvml.loop.run` schedules the ticks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.samples import Event, Sample
from bubblewatch.sources.nvml.api import EventSet, Nvml
from bubblewatch.sources.nvml.capabilities import Capabilities, probe
from bubblewatch.sources.nvml.errors import (
    ErrorCounts,
    NvmlDriverNotFound,
    NvmlError,
    NvmlGpuLost,
    NvmlTimeout,
    NvmlUninitialized,
)
from bubblewatch.sources.nvml.reader import GPM_MIN_INTERVAL_S, GpuReader

log = logging.getLogger("bubblewatch.nvml")
# Drain at most this many Xid events per tick, so a storm cannot stall sampling; the rest
# stay queued in the driver and are read at the next ticks (a warning says so).
MAX_EVENTS_PER_TICK = 64


@dataclass(frozen=True)
class SamplerConfig:
    """How fast to sample and how to behave when things fail."""

    interval_s: float = 1.0
    burst_interval_s: float = 0.1
    gpm_min_interval_s: float = GPM_MIN_INTERVAL_S
    sample_buffers: bool = True
    xid_events: bool = True
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    gpus: tuple[int, ...] | None = None  # None: every GPU NVML sees

    def __post_init__(self) -> None:
        for name in ("interval_s", "burst_interval_s", "retry_initial_s", "retry_max_s"):
            v = getattr(self, name)
            if not v > 0:
                raise ValueError(f"sampler {name} must be > 0, got {v!r}")
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("sampler retry_max_s must be >= retry_initial_s")


@dataclass
class _Lost:
    since_s: float
    retry_at_s: float
    backoff_s: float
    attempts: int = 0


@dataclass
class _Gpu:
    info: GpuInfo
    reader: GpuReader | None
    lost: _Lost | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class NvmlSource:
    """Samples every GPU through NVML. Open with `NvmlSource.open(config)`."""

    def __init__(
        self,
        config: SamplerConfig,
        nvml: Nvml,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.nvml = nvml
        self.wall_clock = wall_clock
        self.driver_version = ""
        self._gpus: dict[int, _Gpu] = {}
        self._events: list[Event] = []
        self._event_set: EventSet | None = None
        self._burst_until_s = float("-inf")
        self._closed = False
        self.last_poll_duration_s = 0.0
        self.last_success_wall_s: float | None = None

    @classmethod
    def open(
        cls,
        config: SamplerConfig | None = None,
        *,
        nvml: Nvml | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> NvmlSource:
        """Initialise NVML and probe every GPU. Raises NvmlDriverNotFound without a driver/GPU."""
        src = cls(config or SamplerConfig(), nvml or Nvml(), wall_clock=wall_clock)
        src._start()
        return src

    @property
    def errors(self) -> ErrorCounts:
        return self.nvml.errors

    # -- start and stop --
    def _start(self) -> None:
        self.nvml.init()
        try:
            self.driver_version = self.nvml.driver_version()
            count = self.nvml.device_count()
            if count == 0:
                raise NvmlDriverNotFound("nvmlDeviceGetCount", 9, "the driver sees no GPU")
            wanted = self.config.gpus if self.config.gpus is not None else tuple(range(count))
            for i in wanted:
                if not 0 <= i < count:
                    raise NvmlDriverNotFound(
                        "nvmlDeviceGetHandleByIndex", 2, f"GPU {i} not present ({count} GPUs)"
                    )
            self._open_events()
            for i in wanted:
                self._gpus[i] = self._open_gpu(i)
        except BaseException:
            self.close()
            raise

    def _open_gpu(self, i: int) -> _Gpu:
        now_mono = time.monotonic()
        try:
            h = self.nvml.handle(i)
            info = GpuInfo(
                index=i,
                uuid=self.nvml.uuid(h),
                name=self.nvml.name(h),
                power_limit_w=self._optional(lambda: self.nvml.power_limit_w(h)),
                pci_bus_id=self._optional(lambda: self.nvml.pci_bus_id(h)) or "",
            )
            reader = self._reader(i, h)
        except NvmlGpuLost as e:
            log.warning("GPU %d is lost at start (%s); will retry", i, e)
            gpu = _Gpu(GpuInfo(index=i), None)
            gpu.lost = self._new_lost(now_mono)
            self._event("gpu_lost", i, {"error": str(e)})
            return gpu
        self._register_xid(i, h)
        return _Gpu(info, reader)

    def _reader(self, i: int, h: Any) -> GpuReader:
        caps = probe(self.nvml, i, h)
        return GpuReader(
            self.nvml,
            i,
            h,
            caps,
            start_wall_s=self.wall_clock(),
            gpm_min_interval_s=self.config.gpm_min_interval_s,
            sample_buffers=self.config.sample_buffers,
        )

    @staticmethod
    def _optional(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except NvmlGpuLost:
            raise
        except NvmlError:
            return None

    def _open_events(self) -> None:
        if not self.config.xid_events:
            return
        try:
            self._event_set = self.nvml.event_set()
        except NvmlError as e:
            log.info("Xid events not available: %s", e)

    def _register_xid(self, i: int, h: Any) -> None:
        if self._event_set is None:
            return
        try:
            self.nvml.register_xid(h, self._event_set)
        except NvmlError as e:
            log.info("GPU %d: Xid events not available: %s", i, e)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for g in self._gpus.values():
            if g.reader is not None:
                g.reader.close()
        if self._event_set is not None:
            with contextlib.suppress(NvmlError):
                self.nvml.event_set_free(self._event_set)
            self._event_set = None
        with contextlib.suppress(NvmlError):
            self.nvml.shutdown()

    def __enter__(self) -> NvmlSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Source protocol --
    def gpus(self) -> tuple[GpuInfo, ...]:
        return tuple(g.info for _, g in sorted(self._gpus.items()))

    def capabilities(self) -> dict[int, Capabilities]:
        return {i: g.reader.caps for i, g in sorted(self._gpus.items()) if g.reader is not None}

    def lost_gpus(self) -> tuple[int, ...]:
        return tuple(i for i, g in sorted(self._gpus.items()) if g.lost is not None)

    def burst(self, until_s: float) -> None:
        """Sample at the burst rate until monotonic time `until_s` (e.g. detector unsure)."""
        self._burst_until_s = max(self._burst_until_s, until_s)

    def interval_s(self, now_s: float) -> float:
        if now_s < self._burst_until_s:
            return self.config.burst_interval_s
        return self.config.interval_s

    def events(self) -> list[Event]:
        out, self._events = self._events, []
        return out

    def poll(self, now_s: float) -> list[Sample]:
        """One tick at monotonic time `now_s`: every GPU's reading, buffered samples, events."""
        t0 = time.perf_counter()
        out: list[Sample] = []
        for i, g in sorted(self._gpus.items()):
            if g.lost is not None:
                if now_s >= g.lost.retry_at_s:
                    self._recover(i, g, now_s)
                if g.lost is not None:
                    continue
            reader = g.reader
            if reader is None:  # pragma: no cover - a GPU without reader is always lost
                continue
            try:
                values = reader.read(now_s)
                wall = self.wall_clock()
                out.extend(reader.drain_buffers())
            except NvmlGpuLost as e:
                self._mark_lost(i, g, now_s, e)
                continue
            except NvmlUninitialized as e:
                self._mark_lost(i, g, now_s, e)
                continue
            if values:
                out.append(Sample(wall, i, values))
        self._drain_xid()
        if out:
            self.last_success_wall_s = max(s.t_s for s in out)
        self.last_poll_duration_s = time.perf_counter() - t0
        return out

    # -- faults --
    def _event(self, kind: str, gpu: int | None, detail: dict[str, Any]) -> None:
        self._events.append(Event(self.wall_clock(), kind, gpu, detail))

    def _new_lost(self, now_s: float) -> _Lost:
        b = self.config.retry_initial_s
        return _Lost(since_s=now_s, retry_at_s=now_s + b, backoff_s=b)

    def _mark_lost(self, i: int, g: _Gpu, now_s: float, err: NvmlError) -> None:
        log.error("GPU %d lost (%s); the other GPUs go on, retrying with backoff", i, err)
        if g.reader is not None:
            g.reader.close()
            g.reader = None
        g.lost = self._new_lost(now_s)
        self._event("gpu_lost", i, {"error": str(err), "code": err.code})

    def _recover(self, i: int, g: _Gpu, now_s: float) -> None:
        """Re-initialise NVML and try the GPU again; back off (doubling) while it stays lost."""
        lost = g.lost
        assert lost is not None
        lost.attempts += 1
        with contextlib.suppress(NvmlError):
            self.nvml.shutdown()
        try:
            self.nvml.init()
            h = self.nvml.handle(i)
            uuid = self.nvml.uuid(h)
            if g.info.uuid and uuid != g.info.uuid:
                raise NvmlGpuLost("nvmlDeviceGetUUID", 15, f"index {i} is now {uuid}")
            reader = self._reader(i, h)
        except NvmlError as e:
            lost.backoff_s = min(lost.backoff_s * 2, self.config.retry_max_s)
            lost.retry_at_s = now_s + lost.backoff_s
            log.info("GPU %d still lost (%s); next try in %.0f s", i, e, lost.backoff_s)
            return
        self._refresh_handles(skip=i, now_s=now_s)
        if not g.info.uuid:
            g.info = GpuInfo(
                index=i, uuid=uuid, name=self._optional(lambda: self.nvml.name(h)) or ""
            )
        g.reader = reader
        g.lost = None
        self._register_xid(i, h)
        log.warning("GPU %d is back after %.1f s", i, now_s - lost.since_s)
        self._event("gpu_recovered", i, {"lost_s": round(now_s - lost.since_s, 3)})

    def _refresh_handles(self, *, skip: int, now_s: float) -> None:
        """After a re-init, fetch fresh handles for the GPUs still working."""
        for j, other in self._gpus.items():
            if j == skip or other.reader is None:
                continue
            try:
                other.reader.handle = self.nvml.handle(j)
            except NvmlError as e:
                self._mark_lost(j, other, now_s, e)

    def _drain_xid(self) -> None:
        if self._event_set is None:
            return
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                ev = self.nvml.wait_xid(self._event_set, 0)
            except NvmlTimeout:
                return
            except NvmlError as e:
                log.debug("Xid wait failed: %s", e)
                return
            log.error("GPU %d: Xid %d", ev.gpu, ev.xid)
            self._event("xid", ev.gpu, {"xid": ev.xid})
        log.warning(
            "%d Xid events read this poll, the most one poll reads; "
            "any more stay queued in the driver for the next polls",
            MAX_EVENTS_PER_TICK,
            extra={"ratelimit_key": "nvml-xid-storm"},
        )
