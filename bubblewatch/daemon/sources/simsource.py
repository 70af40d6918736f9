"""A live source that plays a simulated scenario in real time, so the daemon runs without a GPU.

The scenario is simulated once, ahead of time (`playback.py`), and each
poll reads NVML's quantities off precomputed prefix integrals at the poll's
own time, the way `bubblewatch.sim.observe` does for a whole run:
power averaged over what the model's power usage reading averages (1 s, or the instant
window on GA100 and older) and over the instant-power window, an
energy counter, GPM ratios and PCIe rates averaged since the previous poll
(absent when polls are less than 100 ms apart), utilization.gpu over the
last completed driver period, and clocks, throttle reasons and temperature
at the instant. A poll therefore only indexes arrays; the simulation's cost
is paid at start (and on `switch`), and reported separately
(`simulate_cpu_s`).

Loop wraps are seamless for integrals, and the energy counter keeps rising.
`switch(scenario)` simulates a new scenario in a background thread and
swaps it in atomically at the next poll (the daemon calls it when
`simulate` changes on SIGHUP); the switch shows up as a `scenario_change`
event.

`gpus` plays only some of the scenario's GPUs, numbered 0.. as the host
that holds them would number them: one host of a pipeline that spans hosts
(docs/fleet.md). The topologies keep those GPUs' stages, in order.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from bubblewatch.daemon.sources.playback import (
    DEFAULT_LOOP_S,
    DEFAULT_WARMUP_S,
    FloatArray,
    Playback,
    prepare,
)
from bubblewatch.daemon.sources.protocol import Played
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology
from bubblewatch.sim.errors import ScenarioError

if TYPE_CHECKING:
    from bubblewatch.sources.nvml.interconnect import InterconnectProbe

log = logging.getLogger("bubblewatch.sim")

GPM_MIN_INTERVAL_S = 0.1

# GPM-like fields, read as means since the previous poll: (metric, playback field, is a ratio).
_GPM = (
    (Metric.SM_ACTIVE_RATIO, "sm_active", True),
    (Metric.SM_OCCUPANCY_RATIO, "sm_occupancy", True),
    (Metric.TENSOR_ACTIVE_RATIO, "tensor_active", True),
    (Metric.PCIE_TX_BYTES_PER_S, "pcie_tx_bytes_per_s", False),
    (Metric.PCIE_RX_BYTES_PER_S, "pcie_rx_bytes_per_s", False),
)


@dataclass
class _Pending:
    scenario: str
    playback: Playback | None = None
    error: Exception | None = None


class SimSource:
    """The daemon's source over a simulated scenario, played at the caller's clock."""

    simulated = True

    def __init__(
        self,
        scenario: str,
        *,
        interval_s: float = 1.0,
        loop_s: float = DEFAULT_LOOP_S,
        warmup_s: float = DEFAULT_WARMUP_S,
        seed: int = 0,
        wall_clock: Callable[[], float] = time.time,
        gpus: Sequence[int] = (),
    ) -> None:
        """Simulates `scenario` now (raises ScenarioError for a bad name or file).

        `gpus`: play only these GPUs of the scenario (ScenarioError if it lacks one).
        """
        self._interval_s = interval_s
        self._loop_s = loop_s
        self._warmup_s = warmup_s
        self._seed = seed
        self._wall = wall_clock
        self._pb, cpu = prepare(scenario, loop_s=loop_s, warmup_s=warmup_s, seed=seed)
        self._slice = tuple(gpus)
        _check_slice(self._slice, self._pb)
        self.scenario = scenario
        self.simulate_cpu_s = cpu
        self.last_poll_duration_s = 0.0
        self._t0: float | None = None  # monotonic time of unrolled x = 0
        self._prev: float | None = None  # monotonic time of the previous poll
        self._energy_offset = np.zeros(self._pb.n_gpus)
        self._rng = np.random.default_rng([seed, 0x0B5E])
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._switcher: threading.Thread | None = None
        log.info(
            "simulated scenario ready",
            extra={
                "kv": {
                    "scenario": self._pb.name,
                    "gpus": self._pb.n_gpus,
                    "loop_s": round(self._pb.loop_s, 3),
                    "cpu_s": round(cpu, 3),
                    "bytes": self._pb.nbytes,
                }
            },
        )

    # -- the Source protocol --
    def gpus(self) -> tuple[GpuInfo, ...]:
        if not self._slice:
            return self._pb.gpus
        return tuple(replace(self._pb.gpus[g], index=i) for i, g in enumerate(self._slice))

    def interval_s(self, now_s: float) -> float:
        return self._interval_s

    def set_interval(self, interval_s: float) -> None:
        self._interval_s = interval_s

    def events(self) -> list[Event]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def close(self) -> None:
        t = self._switcher
        if t is not None:
            t.join(timeout=0.1)

    @property
    def playback(self) -> Playback:
        return self._pb

    # -- what the daemon asks besides (daemon.sources.protocol) --
    def played(self) -> Played:
        return Played(self.topologies(), self._pb.engine_argv)

    def burst(self, until_s: float) -> None:
        """Nothing to do: the simulated readings are as good at any rate."""

    def processes(self) -> dict[int, dict[int, int | None]]:
        return {}  # the simulator's pipelines come from `played`, not from processes

    def interconnect(self) -> InterconnectProbe | None:
        return None

    def error_counts(self) -> Mapping[tuple[str, str], int]:
        return {}

    def topologies(self) -> tuple[Topology, ...]:
        if not self._slice:
            return self._pb.topologies
        local = {g: i for i, g in enumerate(self._slice)}
        out = []
        for t in self._pb.topologies:
            stages = tuple(
                tuple(local[g] for g in st if g in local) for st in t.stages if set(st) & set(local)
            )
            if stages:
                out.append(replace(t, stages=stages))
        return tuple(out)

    def poll(self, now_s: float) -> list[Sample]:
        """Every GPU's reading at monotonic time `now_s` (wall-clock timestamps)."""
        t_start = time.perf_counter()
        self._maybe_swap(now_s)
        if self._t0 is None:
            self._t0 = now_s
        pb = self._pb
        x = now_s - self._t0
        wall = self._wall()
        g = pb.n_gpus
        period = pb.util_period_s
        util_end = np.floor((x - pb.util_phase_s) / period) * period + pb.util_phase_s
        prev = x if self._prev is None else self._prev - self._t0
        # Rows: x, x - power usage window (1 s, or instant on GA100 and older), x - instant
        # window, previous poll, util period start and end.
        times = np.empty((6, g))
        times[:4] = np.array([x, x - pb.usage_window_s, x - pb.instant_window_s, prev])[:, None]
        times[4], times[5] = util_end - period, util_end
        integ = pb.integrals(times)
        p = integ[pb.field_index("power_w")]
        pw_avg = (p[0] - p[1]) / pb.usage_window_s
        pw_inst = (p[0] - p[2]) / pb.instant_window_s
        kb = integ[pb.field_index("kernel_busy")]
        util = np.round((kb[5] - kb[4]) / period * 100.0) / 100.0
        noise = pb.noise_ratio
        if noise > 0:
            pw_avg = pw_avg * (1.0 + self._rng.normal(0.0, noise, g))
            pw_inst = pw_inst * (1.0 + self._rng.normal(0.0, noise, g))
        cols: dict[Metric, FloatArray] = {
            Metric.POWER_AVG_W: np.maximum(pw_avg, 0.0),
            Metric.POWER_INSTANT_W: np.maximum(pw_inst, 0.0),
            Metric.ENERGY_J: np.round(pb.energy0_j + self._energy_offset + p[0], 3),
            Metric.KERNEL_BUSY_RATIO: util,
            Metric.SM_CLOCK_MHZ: np.round(pb.at("sm_clock_mhz", x)),
            Metric.CLOCKS_EVENT_REASONS: np.round(pb.at("clocks_event_reasons", x)),
            Metric.TEMPERATURE_C: np.round(pb.at("temperature_c", x)),
        }
        span = x - prev
        if self._prev is not None and span >= GPM_MIN_INTERVAL_S - 1e-9:
            for metric, name, ratio in _GPM:
                f = integ[pb.field_index(name)]
                v = (f[0] - f[3]) / span
                if noise > 0:
                    jitter = self._rng.normal(0.0, noise, g)
                    v = v + jitter if ratio else v * (1.0 + jitter)
                cols[metric] = np.clip(v, 0.0, 1.0) if ratio else np.maximum(v, 0.0)
        self._prev = now_s
        metrics = list(cols)
        table = np.stack([cols[m] for m in metrics], axis=1).tolist()
        out = [
            Sample(
                wall,
                g.index,
                {m: v for m, v in zip(metrics, row, strict=True) if not math.isnan(v)},
            )
            for g, row in zip(pb.gpus, table, strict=True)
        ]
        if self._slice:
            out = [out[g]._replace(gpu=i) for i, g in enumerate(self._slice)]
        self.last_poll_duration_s = time.perf_counter() - t_start
        return out

    def load(self, now_s: float) -> LoadSample:
        """The simulated engine's running and queued requests at monotonic time `now_s`."""
        x = 0.0 if self._t0 is None else now_s - self._t0
        running, queued = self._pb.load(x)
        return LoadSample(
            self._wall(),
            None if math.isnan(running) else running,
            None if math.isnan(queued) else queued,
        )

    # -- switching scenario at runtime --
    def switch(self, scenario: str) -> bool:
        """Simulate `scenario` in the background; the next poll after it is ready plays it."""
        if scenario == self.scenario and self._pending is None:
            return True
        pending = _Pending(scenario)
        with self._lock:
            self._pending = pending

        def work() -> None:
            try:
                pending.playback, cpu = prepare(
                    scenario, loop_s=self._loop_s, warmup_s=self._warmup_s, seed=self._seed
                )
                _check_slice(self._slice, pending.playback)
                self.simulate_cpu_s += cpu
            except Exception as e:  # surfaced by the next poll's log line
                pending.error = e

        self._switcher = threading.Thread(target=work, name="bubblewatch-sim-switch", daemon=True)
        self._switcher.start()
        return True

    def _maybe_swap(self, now_s: float) -> None:
        with self._lock:
            p = self._pending
            if p is None or (p.playback is None and p.error is None):
                return
            self._pending = None
        if p.error is not None or p.playback is None:
            log.error(
                "cannot switch simulated scenario; the old one keeps playing",
                extra={"kv": {"scenario": p.scenario, "error": str(p.error)}},
            )
            return
        old, new = self._pb, p.playback
        # Keep each GPU's energy counter rising across the switch.
        x = 0.0 if self._t0 is None else now_s - self._t0
        px = old.integrals(np.full((1, old.n_gpus), x))[old.field_index("power_w"), 0]
        old_energy = old.energy0_j + self._energy_offset + px
        offset = np.zeros(new.n_gpus)
        n = min(old.n_gpus, new.n_gpus)
        offset[:n] = old_energy[:n] - new.energy0_j[:n]
        self._energy_offset = offset
        self._t0 = now_s
        self._pb = new
        self.scenario = p.scenario
        with self._lock:
            self._events.append(
                Event(self._wall(), "scenario_change", None, {"from": old.name, "to": new.name})
            )
        log.info("simulated scenario switched", extra={"kv": {"from": old.name, "to": new.name}})


def _check_slice(gpus: tuple[int, ...], pb: Playback) -> None:
    bad = [g for g in gpus if not 0 <= g < pb.n_gpus]
    if bad:
        raise ScenarioError(
            f"GPU(s) {bad} not in scenario {pb.name!r} (it has GPUs 0..{pb.n_gpus - 1})",
            field="simulate_gpus",
        )
