"""Per-GPU levels learned from the data, and occupancy: the share of time doing useful work.

NCCL receive spin keeps `utilization.gpu` near 100% with SM activity near 0,
so occupancy comes from SM activity (GPM) when present, else from power
between learned idle and compute levels (less certain: spin raises power).

What "computing flat out" reads is learned per GPU and per job, not assumed:
the SM activity of a tensor-parallel stage that works all the time may never
exceed 0.6 (its kernels wait on all-reduces), so a GPU whose SM activity sits
on a plateau below 0.75 while its power says it works takes that plateau as
its compute level. Power needs a reference: the limit in the file, else the
known limit of the GPU model, else (least certain) the window's own maximum.
Samples with no kernel at all (`utilization.gpu` 0) are idle, whatever the
card draws there (an H100 holding a loaded model sits at ~120 W).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.detect.grid import Grid
from bubblewatch.detect.reductions import median
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.model.gpu_models import known_power_limit_w, power_average_s
from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE, Metric
from bubblewatch.model.recording import Recording

FloatArray = npt.NDArray[np.float64]

SIGNAL_SM = "sm_active"
SIGNAL_POWER = "power"

# How each GPU's compute SM level was found, and how far it may be off (relative).
LEVEL_LEARNED, LEVEL_PLATEAU, LEVEL_MODEL, LEVEL_ASSUMED = "learned", "plateau", "model", "assumed"
LEVEL_HISTORY = "history"  # learned in an earlier window of the same job (the daemon keeps it)
LEVEL_UNCERTAINTY = {
    LEVEL_LEARNED: 0.1,
    LEVEL_PLATEAU: 0.15,
    LEVEL_MODEL: 0.2,
    LEVEL_HISTORY: 0.15,
    LEVEL_ASSUMED: 0.3,
}
# What a later window of the same job may take over (not an assumption, not a level taken over).
LEVELS_TO_KEEP = frozenset({LEVEL_LEARNED, LEVEL_PLATEAU, LEVEL_MODEL})
POWER_LEVEL_UNCERTAINTY = 0.25


@dataclass(frozen=True)
class Levels:
    """What "idle", "waiting" and "computing" look like on these GPUs in this window."""

    signal: str  # SIGNAL_SM or SIGNAL_POWER
    spin_sm_active: float | None
    compute_sm_active: float | None  # the median of the per-GPU compute levels
    compute_sm_learned: bool  # every GPU's level came from its own data
    idle_power_w: FloatArray  # per GPU, NaN when no power
    idle_power_source: tuple[str, ...]  # per GPU
    compute_power_w: float | None
    spin_power_share: float = 0.0  # waiting draw above idle, as a share of compute minus idle
    compute_sm_by_gpu: FloatArray | None = None  # per GPU
    compute_level_source: tuple[str, ...] = ()  # per GPU: learned, plateau, model, assumed
    power_reference_w: float | None = None  # the power limit the levels were judged against
    power_reference_source: str | None = None  # "file", "gpu_model" or None
    # per GPU: the highest SM activity its samples show (compute_percentile), a lower bound
    # of its compute level (a sample averages computing at the level with waiting below it)
    top_sm_by_gpu: FloatArray | None = None
    # per GPU: what its power_avg_w reading averages over, in s, from its model's name (1 s
    # on Ampere except GA100 and newer, 0 for an instant on GA100 and older; 1 s unknown)
    power_average_s_by_gpu: FloatArray | None = None

    @property
    def uncertainty_ratio(self) -> float:
        """Relative uncertainty of the compute level, hence of every occupancy."""
        if self.signal == SIGNAL_POWER:
            return POWER_LEVEL_UNCERTAINTY
        return max((LEVEL_UNCERTAINTY[s] for s in self.compute_level_source), default=0.3)


def power_metric(grid: Grid) -> Metric | None:
    """Instant power where reported (sharper in time), else NVML's power reading (a 1 s
    average on Ampere except GA100 and newer, an instant on GA100 and older)."""
    for m in (Metric.POWER_INSTANT_W, Metric.POWER_AVG_W):
        arr = grid.get(m)
        if arr is not None and np.isfinite(arr).any():
            return m
    return None


def power_reference(recording: Recording, gpus: tuple[int, ...]) -> tuple[float | None, str | None]:
    """The GPUs' power limit: from the file, else the GPU model's default, else None."""
    infos = [g for g in recording.gpus if g.index in gpus]
    given = [g.power_limit_w for g in infos if g.power_limit_w is not None and g.power_limit_w > 0]
    if given:
        return median(given), "file"
    known = [w for w in (known_power_limit_w(g.name) for g in infos if g.name) if w is not None]
    if known:
        return median(known), "gpu_model"
    return None, None


def power_average_by_gpu(recording: Recording, gpus: tuple[int, ...]) -> FloatArray:
    """Per GPU, what its power_avg_w averages over (s), by its name (gpu_models; a GPU
    whose model is not known or not named is taken for a 1 s average)."""
    names = {g.index: g.name for g in recording.gpus}
    return np.array([power_average_s(names.get(g)) for g in gpus], dtype=np.float64)


def learn_levels(
    grid: Grid,
    recording: Recording,
    options: DetectOptions,
    *,
    known_sm_levels: Mapping[int, float] | None = None,
) -> Levels:
    """Spin and per-GPU compute SM levels, idle power per GPU, compute power (pooled).

    `known_sm_levels`: per GPU index, the compute SM level an earlier window of the same
    job learned; a GPU whose level this window can only assume takes it (`history`).
    """
    sm = grid.get(Metric.SM_ACTIVE_RATIO)
    kb = grid.get(Metric.KERNEL_BUSY_RATIO)
    has_sm = sm is not None and bool(np.isfinite(sm).any())
    ref, ref_source = power_reference(recording, grid.gpus)
    pm = power_metric(grid)
    power = grid.values[pm] if pm is not None else None
    spin = compute = None
    by_gpu: FloatArray | None = None
    tops: FloatArray | None = None
    sources: tuple[str, ...] = ()
    if sm is not None and has_sm:
        # Every sample mixes spin with some compute, so a low percentile bounds the spin
        # level from above; in a loaded pipeline no sample is pure spin, so the bound is
        # capped by the assumed spin level (a spin kernel holds a few SMs).
        low = float(np.nanpercentile(sm, options.idle_percentile))
        spin = float(np.clip(low, 0.0, options.spin_sm_active))
        tops = sm_tops(sm, options)
        by_gpu, sources = _compute_sm_levels(
            sm, tops, kb=kb, power=power, ref_w=ref, options=options
        )
        if known_sm_levels:
            by_gpu, sources = _from_history(grid.gpus, by_gpu, tops, sources, known_sm_levels)
        compute = median(by_gpu)
    idle = np.full(len(grid.gpus), np.nan)
    idle_sources = ["none"] * len(grid.gpus)
    compute_power = None
    if power is not None and np.isfinite(power).any():
        compute_power = float(np.nanpercentile(power, options.compute_percentile))
        if ref is not None:
            compute_power = max(compute_power, options.compute_share_of_power_limit * ref)
        for k, g in enumerate(grid.gpus):
            idle_k, src = _idle_power(recording, g, pm, options)  # type: ignore[arg-type]
            if src == "none" and kb is not None:
                sm_k = None if sm is None or not has_sm else sm[k]
                idle_k, src = _idle_from_no_kernels(power[k], kb[k], sm_k, options.spin_sm_active)
            if src == "none" and np.isfinite(power[k]).any():
                # Never seen idle: the low percentile is the waiting (spin) level, an
                # upper bound; idle draw is a small share of the compute level on any card.
                low = float(np.nanpercentile(power[k], options.idle_percentile))
                cap = options.idle_share_of_compute_power * compute_power
                idle_k, src = (low, "low_percentile") if low <= cap else (cap, "assumed_share")
            idle[k], idle_sources[k] = idle_k, src
    return Levels(
        signal=SIGNAL_SM if has_sm else SIGNAL_POWER,
        spin_sm_active=spin,
        compute_sm_active=compute,
        compute_sm_learned=bool(sources) and all(s != LEVEL_ASSUMED for s in sources),
        idle_power_w=idle,
        idle_power_source=tuple(idle_sources),
        compute_power_w=compute_power,
        spin_power_share=options.spin_share_of_compute_power,
        compute_sm_by_gpu=by_gpu,
        compute_level_source=sources,
        power_reference_w=ref,
        power_reference_source=ref_source,
        top_sm_by_gpu=tops,
        power_average_s_by_gpu=power_average_by_gpu(recording, grid.gpus),
    )


def _from_history(
    gpus: tuple[int, ...],
    levels: FloatArray,
    tops: FloatArray,
    sources: tuple[str, ...],
    known: Mapping[int, float],
) -> tuple[FloatArray, tuple[str, ...]]:
    """Assumed levels replaced by the ones the job's earlier windows learned (never below
    this window's highest sample: a level is at least what a sample shows)."""
    out, src = levels.copy(), list(sources)
    for k, g in enumerate(gpus):
        if src[k] == LEVEL_ASSUMED and g in known and np.isfinite(known[g]):
            top = float(tops[k]) if np.isfinite(tops[k]) else 0.0
            out[k], src[k] = float(np.clip(max(known[g], top), 0.0, 1.0)), LEVEL_HISTORY
    return out, tuple(src)


def sm_tops(sm: FloatArray, options: DetectOptions) -> FloatArray:
    """Each GPU's highest SM activity (compute_percentile of its samples), NaN when none."""
    return np.array(
        [
            float(np.percentile(r[np.isfinite(r)], options.compute_percentile))
            if np.isfinite(r).any()
            else np.nan
            for r in sm
        ]
    )


def _compute_sm_levels(
    sm: FloatArray,
    tops: FloatArray,
    *,
    kb: FloatArray | None,
    power: FloatArray | None,
    ref_w: float | None,
    options: DetectOptions,
) -> tuple[FloatArray, tuple[str, ...]]:
    """Each GPU's SM activity when computing flat out, and how it was found.

    Learned when the GPU reached min_compute_sm_active. When some GPU of the job
    did, the others take the job's level (their lower tops average work and
    waiting). When none did, a plateau counts as the level if the GPU spends a
    good share of the window near its top, its samples also dip well below it
    (the sampling resolves its turns), kernels run and it draws working power
    (TP stages waiting on all-reduces); when most GPUs of the job show one,
    every GPU takes its own top. Otherwise the assumed floor.
    """
    n = sm.shape[0]
    levels = np.full(n, options.min_compute_sm_active)
    sources = [LEVEL_ASSUMED] * n
    learned = np.isfinite(tops) & (tops >= options.min_compute_sm_active)
    for k in np.flatnonzero(learned).tolist():
        levels[k], sources[k] = float(tops[k]), LEVEL_LEARNED
    if learned.any():
        # Some GPU of the job computed flat out: the others' lower tops are averages of
        # work and waiting within a sample, not a lower level. They take the job's level.
        for k in np.flatnonzero(~learned).tolist():
            levels[k], sources[k] = median(tops[learned]), LEVEL_MODEL
        return levels, tuple(sources)
    on_plateau = [
        k
        for k in range(n)
        if np.isfinite(tops[k])
        and tops[k] > 0
        and _plateau(
            sm[k],
            kb_k=None if kb is None else kb[k],
            power_k=None if power is None else power[k],
            top=float(tops[k]),
            ref_w=ref_w,
            options=options,
        )
    ]
    # The GPUs of one job work alike: when most show a plateau, every one takes its own top.
    if len(on_plateau) * 2 >= n:
        for k in range(n):
            if np.isfinite(tops[k]) and tops[k] > 0:
                levels[k], sources[k] = float(tops[k]), LEVEL_PLATEAU
    return levels, tuple(sources)


def _plateau(
    sm_k: FloatArray,
    *,
    kb_k: FloatArray | None,
    power_k: FloatArray | None,
    top: float,
    ref_w: float | None,
    options: DetectOptions,
) -> bool:
    ok = np.isfinite(sm_k)
    near = ok & (sm_k >= options.plateau_fraction_of_top * top)
    if near.mean() < options.plateau_min_share or ref_w is None or power_k is None:
        return False
    # The samples must resolve work from waiting (some fall well below the top): a top
    # that every sample shares is an average over turns, not a level.
    if float(np.percentile(sm_k[ok], 5)) > options.plateau_max_dip_share * top:
        return False
    busy = kb_k is None or float(np.nanmean(np.where(near, kb_k, np.nan))) >= 0.8
    watts = float(np.nanmean(np.where(near, power_k, np.nan)))
    return busy and np.isfinite(watts) and watts >= options.plateau_power_share_of_limit * ref_w


def _idle_power(
    recording: Recording, gpu: int, metric: Metric, options: DetectOptions
) -> tuple[float, str]:
    """Median power of samples the driver flagged GpuIdle, when there are a few."""
    s = recording.series[gpu]
    reasons, power = s.get(Metric.CLOCKS_EVENT_REASONS), s.get(metric)
    if reasons is None or power is None:
        return float("nan"), "none"
    ok = np.isfinite(reasons) & np.isfinite(power)
    flagged = ok & ((np.where(ok, reasons, 0).astype(np.int64) & CLOCKS_EVENT_GPU_IDLE) != 0)
    if flagged.sum() < 3:
        return float("nan"), "none"
    return median(power[flagged]), "gpu_idle_samples"


def _idle_from_no_kernels(
    power_k: FloatArray, kb_k: FloatArray, sm_k: FloatArray | None, spin_sm: float
) -> tuple[float, str]:
    """Median power while no kernel ran at all (utilization.gpu 0): the card's idle draw.

    utilization.gpu describes the driver's last completed period (1/6-1 s), which may end
    well before the power reading: a GPU taking turns shorter than that (a layer split) is
    often computing again when its power is read (simulated layersplit4 at 0.5 s: a median
    of 188 W over such samples on a 55 W idle card drawing 85 W on average). Where SM
    activity is sampled (the mean since the previous poll, up to the reading) a sample
    counts only if it shows no work either.
    """
    quiet = np.isfinite(power_k) & np.isfinite(kb_k) & (kb_k <= 0.01)
    if sm_k is not None and np.isfinite(sm_k).any():
        quiet &= np.isfinite(sm_k) & (sm_k <= spin_sm)
    if quiet.sum() < 3:
        return float("nan"), "none"
    return median(power_k[quiet]), "no_kernel_samples"


def occupancy(grid: Grid, levels: Levels) -> FloatArray:
    """Per-GPU, per-step share of time spent computing, 0..1 (NaN where unknown)."""
    if levels.signal == SIGNAL_SM:
        sm = grid.values[Metric.SM_ACTIVE_RATIO]
        lo = levels.spin_sm_active or 0.0
        hi = (
            levels.compute_sm_by_gpu[:, None]
            if levels.compute_sm_by_gpu is not None
            else np.full((sm.shape[0], 1), levels.compute_sm_active or 1.0)
        )
        return np.asarray(
            np.clip((sm - lo) / np.maximum(hi - lo, 1e-6), 0.0, 1.0), dtype=np.float64
        )
    pm = power_metric(grid)
    if pm is None or levels.compute_power_w is None:
        return np.full((len(grid.gpus), grid.n_steps), np.nan)
    power = grid.values[pm]
    idle = levels.idle_power_w[:, None]
    # Waiting ranks spin above idle; without SM activity that draw can only be assumed.
    wait = idle + levels.spin_power_share * (levels.compute_power_w - idle)
    span = np.maximum(levels.compute_power_w - wait, 1e-6)
    return np.asarray(np.clip((power - wait) / span, 0.0, 1.0), dtype=np.float64)
