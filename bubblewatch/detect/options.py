"""Tunable thresholds of the detector, in one frozen record with their reasons."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DetectOptions:
    """Thresholds the verdicts use. Defaults follow DESIGN.md sections 3 and 6.

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
    compute_percentile: float = 99.5
    idle_percentile: float = 2.0
    # A GPU never flagged GpuIdle in the window: its idle draw is taken as at most this
    # share of the learned compute power (85 W of ~520 W on the seed's 600 W cards).
    idle_share_of_compute_power: float = 0.2
    # The compute power level is never assumed below this share of the power limit (when
    # known): 1 s average power never shows a stage computing flat out in a serialized
    # pipeline, so the data alone would take the spin level for the compute level.
    compute_share_of_power_limit: float = 0.7
    # Power-only occupancy: a spinning rank draws about this share of the way from idle to
    # compute power (~150 W between 85 W idle and ~520 W compute on the seed's cards).
    spin_share_of_compute_power: float = 0.15
    # Idle: nothing queued or running and stages (almost) never compute.
    idle_occupancy: float = 0.06
    idle_kernel_busy: float = 0.15
    idle_load: float = 0.5
    # Serialized: only one stage works at a time, so occupancies sum to <= ~1.
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
    # Load: at most this many running requests per stage cannot fill the pipeline.
    load_limited_running: float = 1.5
