"""The observation model: what NVML reports when each GPU is polled every `interval_s`.

Reads only the Timeline (like the fake NVML library), per NVML (docs/nvml.md):
- power_avg_w: mean power over the trailing 1 s on Ampere (except GA100) and newer,
  over the instant window on GA100 and older (GpuSpec.power_usage_window_s);
  power_instant_w: over a short trailing window (`instant_power_window_s`, 25 ms by default);
- energy_j: an arbitrary starting counter plus the integral of power;
- GPM ratios and PCIe rates: means since that GPU's previous poll, absent when
  the polls are less than 100 ms apart (and at the first poll);
- kernel_busy_ratio: utilization.gpu, the kernel-busy share of the last
  *completed* driver sample period, in whole percent;
- SM clock, reasons bitmask and temperature: the value at the poll instant.
GPUs are polled one after another within a tick (`gpu_stagger_s` apart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.limits import SIM_MAX_SAMPLES
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, LoadSeries, Recording
from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sim.result import LoadHistory, SimResult
from bubblewatch.sim.spec import Scenario
from bubblewatch.sim.timeline import Timeline
from bubblewatch.sim.training_spec import TrainingScenario

PollScenario = Scenario | TrainingScenario

FloatArray = npt.NDArray[np.float64]
DEFAULT_EPOCH_S = 1_750_000_000.0
GPM_MIN_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Polls:
    """When each GPU is polled (seconds from the run's start) and the draws of the noise.

    Drawn all at once, in one order, so an observation made a part of the
    timeline at a time (`measure` on each part) reads the same as one made whole.
    """

    t: FloatArray  # (n_gpus, n_ticks)
    keep: npt.NDArray[np.bool_]  # False: the poll was dropped
    prev: FloatArray  # the same GPU's previous kept poll (NaN: none)
    util_end: FloatArray  # end of the last completed utilization period
    energy0: FloatArray  # (n_gpus, 1) the energy counter at the start
    gpm_noise: dict[Metric, FloatArray | None]
    power_noise: tuple[FloatArray, FloatArray] | None  # (avg, instant)
    util_period_s: float
    instant_window_s: float
    usage_window_s: float  # what power_avg_w (nvmlDeviceGetPowerUsage) averages over

    @property
    def n_ticks(self) -> int:
        return int(self.t.shape[1])

    def lookback_s(self, ticks: slice) -> FloatArray:
        """How far before each tick's earliest poll its windows reach (power, GPM, utilization)."""
        t = self.t[:, ticks]
        earliest = np.fmin(
            np.fmin(t - self.usage_window_s, self.util_end[:, ticks] - self.util_period_s),
            self.prev[:, ticks],
        )
        out: FloatArray = np.nanmax(t - earliest, axis=0)
        return out


_GPM_FIELDS = (
    (Metric.SM_ACTIVE_RATIO, "sm_active", True),
    (Metric.SM_OCCUPANCY_RATIO, "sm_occupancy", True),
    (Metric.TENSOR_ACTIVE_RATIO, "tensor_active", True),
    (Metric.PCIE_TX_BYTES_PER_S, "pcie_tx_bytes_per_s", False),
    (Metric.PCIE_RX_BYTES_PER_S, "pcie_rx_bytes_per_s", False),
)


def observe(
    res: SimResult,
    interval_s: float = 1.0,
    seed: int = 0,
    *,
    noise_ratio: float | None = None,
    jitter_s: float | None = None,
    drop_ratio: float | None = None,
    gpu_stagger_s: float | None = None,
    load_interval_s: float = 1.0,
    start_epoch_s: float = DEFAULT_EPOCH_S,
) -> Recording:
    """A Recording of what polling NVML every `interval_s` would have returned."""
    tl = res.timeline
    polls = plan_polls(
        res.scenario,
        tl.n_gpus,
        min(res.duration_s, tl.duration_s),
        interval_s,
        seed,
        noise_ratio=noise_ratio,
        jitter_s=jitter_s,
        drop_ratio=drop_ratio,
        gpu_stagger_s=gpu_stagger_s,
    )
    base = measure(tl, polls, slice(None), tl.prefix("power_w"))
    t, keep = polls.t, polls.keep
    series = {
        g: GpuSeries(g, t[g, keep[g]] + start_epoch_s, {m: v[g, keep[g]] for m, v in base.items()})
        for g in range(tl.n_gpus)
    }
    span = min(res.duration_s, tl.duration_s)
    return Recording(
        gpus=res.gpus,
        series=series,
        topology=res.topology,
        load=load_series(res.load, load_interval_s, span, start_epoch_s),
        meta=_meta(res, interval_s, seed, start_epoch_s),
    )


def plan_polls(
    sc: PollScenario,
    n_gpus: int,
    span_s: float,
    interval_s: float,
    seed: int,
    *,
    noise_ratio: float | None = None,
    jitter_s: float | None = None,
    drop_ratio: float | None = None,
    gpu_stagger_s: float | None = None,
) -> Polls:
    """The polls of `n_gpus` GPUs every `interval_s` over `span_s` seconds, and their noise."""
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ScenarioError(f"poll interval must be > 0 s, got {interval_s!r}", field="interval_s")
    spec = sc.observation
    noise = spec.noise_ratio if noise_ratio is None else noise_ratio
    jitter = spec.jitter_s if jitter_s is None else jitter_s
    drop = spec.drop_ratio if drop_ratio is None else drop_ratio
    stagger = spec.gpu_stagger_s if gpu_stagger_s is None else gpu_stagger_s
    gpu = sc.hardware.gpu
    rng = np.random.default_rng([seed, 0x0B5E])
    span = span_s
    last_offset = stagger * (n_gpus - 1) + 3.0 * jitter
    n_ticks = math.floor((span - last_offset) / interval_s + 1e-9)
    if n_gpus * n_ticks > SIM_MAX_SAMPLES:  # docs/daemon.md, Limits
        raise ScenarioError(
            f"polling {n_gpus} GPUs every {interval_s:g} s for {span:g} s is "
            f"{n_gpus * n_ticks} samples; at most {SIM_MAX_SAMPLES}",
            field="interval_s",
        )
    if n_ticks < 1:
        raise ScenarioError(
            f"poll interval {interval_s:g} s leaves no sample inside {span:g} s",
            field="interval_s",
        )
    ticks = np.arange(1, n_ticks + 1) * interval_s
    offs = np.arange(n_gpus)[:, None] * stagger
    jit = np.abs(rng.normal(0.0, jitter, (n_gpus, n_ticks))) if jitter > 0 else 0.0
    t = np.minimum(ticks[None, :] + offs + np.minimum(jit, interval_s / 2), span)
    keep = rng.random((n_gpus, n_ticks)) >= drop if drop > 0 else np.ones(t.shape, dtype=bool)
    energy0 = rng.uniform(1e5, 1e7, (n_gpus, 1))
    period = gpu.utilization_period_s
    phase = rng.uniform(0.0, period, (n_gpus, 1))
    util_end = np.floor((t - phase) / period) * period + phase
    # GPM: mean since the same GPU's previous successful poll (dropped polls take no sample).
    idx = np.where(keep, np.arange(n_ticks)[None, :], -1)
    last = np.maximum.accumulate(idx, axis=1)
    before = np.concatenate([np.full((n_gpus, 1), -1), last[:, :-1]], axis=1)
    prev = np.where(before >= 0, np.take_along_axis(t, np.maximum(before, 0), axis=1), np.nan)
    shape = (n_gpus, n_ticks)
    gpm_noise = {m: rng.normal(0.0, noise, shape) if noise > 0 else None for m, _, _ in _GPM_FIELDS}
    power_noise = (
        (rng.normal(0.0, noise, shape), rng.normal(0.0, noise, shape)) if noise > 0 else None
    )
    return Polls(
        t,
        keep,
        prev,
        util_end,
        energy0,
        gpm_noise,
        power_noise,
        period,
        gpu.instant_power_window_s,
        gpu.power_usage_window_s,
    )


def measure(
    tl: Timeline, polls: Polls, ticks: slice, power_prefix: FloatArray
) -> dict[Metric, FloatArray]:
    """What the polls of `ticks` read, (n_gpus, n) per metric, from `tl` (all they reach back to).

    `power_prefix` is `tl`'s power integral from the run's start (the energy counter).
    """
    t = polls.t[:, ticks]
    pre_p = power_prefix
    power_avg = tl.window_mean("power_w", t - polls.usage_window_s, t, pre_p)
    power_inst = tl.window_mean("power_w", t - polls.instant_window_s, t, pre_p)
    energy = polls.energy0 + tl.integral_at("power_w", t, pre_p)
    period = polls.util_period_s
    util_end = polls.util_end[:, ticks]
    util = tl.window_mean("kernel_busy", util_end - period, util_end)
    util = np.where(util_end - period >= 0, np.round(util * 100.0) / 100.0, np.nan)
    clock = np.round(tl.at("sm_clock_mhz", t))
    reasons = np.round(tl.at("clocks_event_reasons", t))
    temp = np.round(tl.at("temperature_c", t))
    prev = polls.prev[:, ticks]
    gpm_ok = (t - prev) >= GPM_MIN_INTERVAL_S - 1e-9  # NaN compares False
    gpm: dict[Metric, FloatArray] = {}
    for metric, name, ratio in _GPM_FIELDS:
        v = tl.window_mean(name, prev, t)
        noise = polls.gpm_noise[metric]
        if noise is not None:
            v = v + noise[:, ticks] if ratio else v * (1 + noise[:, ticks])
        v = np.clip(v, 0.0, 1.0) if ratio else np.maximum(v, 0.0)
        gpm[metric] = np.where(gpm_ok, v, np.nan)
    if polls.power_noise is not None:
        power_avg = power_avg * (1.0 + polls.power_noise[0][:, ticks])
        power_inst = power_inst * (1.0 + polls.power_noise[1][:, ticks])
    return {
        Metric.POWER_AVG_W: np.maximum(power_avg, 0.0),
        Metric.POWER_INSTANT_W: np.maximum(power_inst, 0.0),
        Metric.ENERGY_J: np.round(energy, 3),
        Metric.KERNEL_BUSY_RATIO: util,
        Metric.SM_CLOCK_MHZ: clock,
        Metric.CLOCKS_EVENT_REASONS: reasons,
        Metric.TEMPERATURE_C: temp,
        **gpm,
    }


def load_series(load: LoadHistory, interval_s: float, span: float, epoch: float) -> LoadSeries:
    """The engine's load gauges read every `interval_s`, as its metrics endpoint shows them.

    Where the engine counts one micro-batch (SGLang with PP) the reading is that
    gauge, in `running` and `micro_batch` alike (engine_metrics does the same).
    """
    ts = np.arange(1, math.floor(span / interval_s + 1e-9) + 1, dtype=np.float64) * interval_s
    k = np.searchsorted(load.t_s, ts, side="right") - 1
    running: FloatArray = load.running[k].astype(np.float64)
    queued: FloatArray = load.queued[k].astype(np.float64)
    micro = None if load.micro_batch is None else load.micro_batch[k].astype(np.float64)
    if micro is not None:
        running = np.where(np.isfinite(micro), micro, running)
    return LoadSeries(ts + epoch, running, queued, micro)


def _meta(res: SimResult, interval_s: float, seed: int, epoch: float) -> dict[str, object]:
    return {
        **run_meta(
            res.scenario,
            sim_seed=res.seed,
            duration_s=res.duration_s,
            interval_s=interval_s,
            seed=seed,
            epoch=epoch,
        ),
        "tokens_per_s": round(res.tokens_per_s, 3),
        "truth": res.truth.to_dict(),
        "pipelines": [t.to_dict() for t in res.topologies],
    }


def run_meta(
    sc: Scenario | TrainingScenario,
    *,
    sim_seed: int,
    duration_s: float,
    interval_s: float,
    seed: int,
    epoch: float,
) -> dict[str, object]:
    """What a trace's header says of the simulated run (the outcome comes with the summary)."""
    return {
        "source": "sim",
        "scenario": sc.name,
        "description": sc.description,
        "engine": sc.engine,
        "engine_argv": list(sc.engine_argv),
        "sim_seed": sim_seed,
        "observe_seed": seed,
        "duration_s": duration_s,
        "interval_s": interval_s,
        "sim_t0_epoch_s": epoch,
        **_schedule_meta(sc),
    }


def _schedule_meta(sc: Scenario | TrainingScenario) -> dict[str, object]:
    """A training pipeline's schedule, as a launch's layout would give it (docs/trace-format.md)."""
    if not isinstance(sc, TrainingScenario) or sc.job.schedule in ("none", "forward"):
        return {}  # a layer split's one process launches no pipeline schedule to read
    if sc.job.pp_size < 2:
        return {}
    job = sc.job
    return {
        "schedule": {
            "kind": job.schedule,
            "micro_batches": job.micro_batches,
            "virtual_stages": job.virtual_stages,
            "pp_size": job.pp_size,
        }
    }
