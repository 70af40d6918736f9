"""Tunable thresholds of the detector, in one frozen record with their reasons."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DetectOptions:
    """Thresholds the verdicts use. Defaults: docs/detection.md.

    Ratios are 0..1; times in seconds. Change them only with a scenario that
    shows why.
    """

    # Enough data to say anything.
    min_window_s: float = 10.0
    min_samples_per_gpu: int = 8
    # Common grid: the step is the median sampling interval, never finer than this.
    min_step_s: float = 0.05
    # A grid point farther than this many steps from any real sample is a gap (NaN).
    max_gap_steps: float = 2.5
    # SM activity levels: a spin kernel holds a few SMs (~0.01-0.03). The spin level is the
    # data's low percentile, capped at spin_sm_active (loaded pipelines never show pure
    # spin). The compute level is learned as a high percentile, never assumed below
    # min_compute_sm_active.
    spin_sm_active: float = 0.02
    min_compute_sm_active: float = 0.75
    # A GPU whose SM activity tops out lower counts that top as its compute level when it
    # spends at least plateau_min_share of the window within plateau_fraction_of_top of it,
    # kernels running, at plateau_power_share_of_limit of its power limit or more: a GPU
    # working flat out at a low SM level still draws well above the middle of its power
    # range (the TP8 stages of a real H100 PP2 run, T13: SM 0.55-0.63 at 417-501 W of
    # 700 W, 0.6-0.72), while a stage half busy, averaged over its turns, sits near the
    # middle (pp8-async at 1 s: SM 0.44-0.50 at 288-310 W of 600 W, 0.48-0.52). At 0.45
    # such a stage took its average for its level at some window lengths, and its bubble
    # read 0.08 at 30 s and 300 s but 0.43 at 20-120 s.
    plateau_fraction_of_top: float = 0.8
    plateau_min_share: float = 0.2
    plateau_power_share_of_limit: float = 0.55
    # ... and only when its samples also dip below plateau_max_dip_share of the top (5th
    # percentile): the sampling resolves its turns (T13: 0.3 of 0.56; a serialized stage
    # averaged over turns at 1 s sampling: 0.42 of 0.5).
    plateau_max_dip_share: float = 0.7
    compute_percentile: float = 99.5
    idle_percentile: float = 2.0
    # A GPU never flagged GpuIdle in the window: its idle draw is taken as at most this
    # share of the learned compute power (85 W of ~520 W on the seed's 600 W cards).
    idle_share_of_compute_power: float = 0.2
    # The compute power level is never assumed below this share of the power limit (when
    # known): 1 s average power never shows a stage computing flat out in a serialized
    # pipeline, so the data alone would take the spin level for the compute level.
    compute_share_of_power_limit: float = 0.7
    # A GPU computing draws at least this share of its power limit (the plateau rule's
    # working power): a window's mean draw above idle, against that much, caps the share
    # of it a GPU can have computed (waiting draws idle or more), which bounds the
    # concurrency range from above where the SM level is not seen (level_range.py). On
    # the seed's 600 W cards, a serialized PP8 GPU drawing 176 W (idle 84 W) can have
    # computed at most 37% of the time, not the 71% its highest SM sample allows.
    working_share_of_power_limit: float = 0.55
    # Power-only occupancy: a spinning rank draws about this share of the way from idle to
    # compute power (~150 W between 85 W idle and ~520 W compute on the seed's cards).
    spin_share_of_compute_power: float = 0.15
    # Idle: nothing queued or running and stages (almost) never compute.
    idle_occupancy: float = 0.06
    idle_kernel_busy: float = 0.15
    # Kernels ran at most this share of the window on every GPU (utilization.gpu 0%, with
    # the odd 1-16% blip of a context or a model being set up): idle whatever the power
    # draws (a loaded H100 sits at ~120 W, a starting one at 69-123 W).
    no_kernel_busy: float = 0.02
    idle_load: float = 0.5
    # Serialized: about one micro-batch in flight. The estimate must be closer to one than to
    # two micro-batches and within serialized_sigmas of one given its uncertainty (never
    # below 1 + min_in_flight_uncertainty * serialized_sigmas).
    serialized_max_in_flight: float = 1.5
    serialized_sigmas: float = 2.0
    min_in_flight_uncertainty: float = 0.1
    # ... and the data must rule out two micro-batches: the estimate plus serialized_sigmas
    # deviations stays below this (real pipelines with two or more fill 1.6-1.9 of 2; a TP8
    # x PP2 GPipe run sampled at 1 s, SM level unresolved, reads 1.2 +- 0.36).
    serialized_rule_out_two: float = 1.75
    # Kept for the launch-bound index (one stage holds the pipeline at a time below this).
    serialized_concurrency: float = 1.35
    # Healthy: at least 40% of the stage-time is useful work (stages busy together; the
    # simulated async PP8 runs at ~50% with host overheads between steps).
    healthy_bubble_ratio: float = 0.6
    # Launch-bound: kernels run but SMs stay mostly empty, and between kernels the GPU
    # waits on the CPU (utilization.gpu below 100%, unlike NCCL spin which never stops).
    launch_bound_index: float = 0.5
    min_kernel_gap_ratio: float = 0.02
    # Imbalance: busiest stage over the mean stage occupancy.
    imbalance_ratio: float = 1.25
    # Straggler: throttle bits in this share of samples, or clock below this ratio of the others.
    throttle_fraction: float = 0.2
    straggler_clock_ratio: float = 0.92
    # Lag analysis: fluctuations slower than this are trends and are removed.
    trend_window_s: float = 30.0
    max_lag_s: float = 5.0
    # Peak cross-correlation below this is noise (no lag reported).
    min_lag_correlation: float = 0.25
    # GPUs whose fluctuations correlate this well at zero lag move together (one TP group).
    # (TP ranks compute the same steps: ~0.98-0.99; in-phase pipeline stages ~0.9-0.96.)
    tp_group_correlation: float = 0.97
    # Without a topology, GPU groups busy at once are called a pipeline only when their
    # stagger orders them with at least this confidence.
    min_stagger_confidence: float = 0.3
    # In-phase groups (TP/DP) on real data: a link needs a zero-lag correlation of at least
    # group_min_correlation that stands group_z spreads above the pair's misaligned null,
    # levels within group_level_tolerance + group_level_share * level, and memory in use
    # within group_memory_gib (or 5%). Fluctuations: trend over group_trend_window_s removed.
    group_min_correlation: float = 0.2
    group_z: float = 4.0
    group_strong_correlation: float = 0.9
    # ... and is not lopsided: the correlations at +1..+3 steps minus those at -1..-3 stay
    # within group_max_asymmetry_z of their misaligned spread (neighbouring pipeline stages
    # reach 10-19 in the simulator at 0.1 s; GPUs in phase on real data stay within 3.5).
    group_max_asymmetry_z: float = 4.0
    group_level_tolerance: float = 0.1
    group_level_share: float = 0.25
    group_memory_gib: float = 1.0
    # A GPU with at least this much device memory in use holds a job (a model loaded); an
    # empty card reads ~0 (NVML v2's `used`) or the driver's reserve (v1, a few 100 MiB).
    loaded_memory_gib: float = 1.0
    group_trend_window_s: float = 10.0
    # Without a topology, may GPU groups be judged a pipeline on their stagger at all? The
    # daemon turns this off where it discovered no engine: no pipeline verdict, no alert.
    infer_pipelines: bool = True
    # ... and where it is off, may GPUs taking turns (detect/turns.py) still be judged a layer
    # split? The daemon allows it where discovery saw one process hold several GPUs.
    infer_layer_split: bool = True
    # Where discovery knows the layer blocks of that process (topology/single_process.py's
    # layer_placement): its GPUs in layer order, and whether that comes from where the
    # weights are (resolved: it orders the stages) or is a device-order prior (the turns
    # in the telemetry order them where they can).
    layer_order: tuple[int, ...] = ()
    layer_order_resolved: bool = False
    # Stagger between groups (no topology): significant against stagger_surrogates circular
    # shifts at stagger_alpha, steady over chunks of the window, and standing at least
    # stagger_min_effect above the null's median (simulated pipelines at 0.1-0.2 s: 0.17-0.35,
    # T13: 0.56; eight independent inference processes sharing one host: 0.02-0.06).
    stagger_surrogates: int = 199
    stagger_alpha: float = 0.01
    stagger_min_effect: float = 0.1
    # Turn-taking (no topology, detect/turns.py): GPUs whose busy periods do not overlap,
    # against the same circular-shift null at stagger_alpha, turn_min_effect above its median
    # (normalised: 1 when the shares exchange perfectly; simulated layer splits at 0.1 s:
    # see docs/detection.md), with a busy sum of at most turn_max_busy_sum GPUs.
    turn_min_effect: float = 0.2
    turn_max_busy_sum: float = 1.25
    # Collective wait: waiting GPUs run kernels (utilization.gpu >= cw_wait_kernel_busy) with
    # no work (occupancy <= cw_max_occupancy) while holding GPUs run nothing
    # (utilization.gpu <= cw_hold_kernel_busy). A finding from cw_min_share of the window on,
    # the primary verdict from cw_primary_share.
    cw_wait_kernel_busy: float = 0.9
    cw_hold_kernel_busy: float = 0.3
    cw_max_occupancy: float = 0.15
    cw_max_occupancy_power: float = 0.35  # occupancy from 1 s average power lags the stall
    cw_min_share: float = 0.2
    cw_primary_share: float = 0.5
    cw_max_events: int = 50  # waits listed one by one (the longest; all are counted)
    # Underfed: GPUs of a job that is not a pipeline run kernels with gaps (utilization.gpu
    # at most uf_max_kernel_busy) and use at most uf_max_occupancy of their capacity.
    uf_max_kernel_busy: float = 0.85
    uf_max_occupancy: float = 0.5
    # Launch-bound from power and utilization.gpu alone: every stage under load shows kernel
    # gaps (utilization.gpu below this), where spinning ranks would read 100%.
    power_launch_max_kernel_busy: float = 0.92
    # A training pipeline is as good as its schedule when its measured bubble exceeds the
    # schedule's by at most this (or two standard errors of its variation over the window):
    # the simulated 1F1B at p=4, m=16 with 2 ms sends reads 0.19 against 0.16; the real
    # TP8 x PP2 GPipe run (m=4) 0.19 against 0.20 in its steady phase.
    schedule_tolerance_ratio: float = 0.05
    # Load: at most this many running requests per stage cannot fill the pipeline.
    load_limited_running: float = 1.5
