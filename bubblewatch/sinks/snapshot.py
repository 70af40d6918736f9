"""What the exporter shows, as one immutable value the daemon builds for each scrape.

The collector never reaches into the sampler, detector or rules: the daemon
builds an `ExporterSnapshot` (helpers below build its parts from a Diagnosis)
at scrape time, from the state its last analysis published.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.topology import Topology
from bubblewatch.sinks.alerts.worker import ReceiverStats
from bubblewatch.topology.engine_config import EngineConfig


@dataclass(frozen=True)
class GpuState:
    """A GPU's identity, its place in a pipeline, and its latest reading of each metric."""

    info: GpuInfo
    values: Mapping[Metric, float] = field(default_factory=dict)
    pipeline: str = ""
    stage: int | None = None


@dataclass(frozen=True)
class StageState:
    stage: int
    occupancy_ratio: float | None
    lag_s: float | None
    step_busy_s: float | None = None  # training: seconds of useful work per step


@dataclass(frozen=True)
class PipelineState:
    """One pipeline's latest diagnosis, plus the bubble energy integrated since start."""

    pipeline: str
    verdict: Verdict
    confidence: float
    stages: tuple[StageState, ...] = ()
    concurrency: float | None = None
    bubble_ratio: float | None = None
    bubble_energy_joules_total: float = 0.0
    pp_size: int = 0
    tp_size: int = 0
    interconnect: str = ""
    engine: EngineConfig | None = None
    load_limited: bool | None = None  # set for serialized pipelines (see Diagnosis)
    # Training pipelines judged against their schedule (None: not judged, no period found).
    measured_bubble_ratio: float | None = None
    step_period_s: float | None = None


@dataclass(frozen=True)
class EngineLoadState:
    """A pipeline's serving-engine load now: running and queued requests (None: unknown)."""

    pipeline: str
    running: float | None
    queued: float | None


@dataclass(frozen=True)
class EngineSettingState:
    """A setting the rules see for a pipeline's engine, and where it came from (live, cmdline)."""

    pipeline: str
    setting: str
    source: str
    value: float


@dataclass(frozen=True)
class LiveChangeCount:
    """Live changes of one engine setting seen so far, by whether they took."""

    pipeline: str
    setting: str
    result: str
    count: int


@dataclass(frozen=True)
class PipelineChangeState:
    """The last judged engine change of a pipeline (restart with new settings): after vs before.

    `concurrency_ratio` is after / before; `borne_out` None when nothing could be judged.
    """

    pipeline: str
    changed_at_s: float
    concurrency_ratio: float | None
    borne_out: bool | None


@dataclass(frozen=True)
class ActiveRecommendation:
    pipeline: str
    rule: str
    severity: str


@dataclass(frozen=True)
class Health:
    """The daemon's view of itself. Timestamps are Unix seconds; None means never."""

    last_sample_timestamp_s: float | None = None
    sampling_duration_s: float | None = None
    analysis_duration_s: float | None = None
    nvml_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    config_reload_ok: bool = True
    config_reload_timestamp_s: float | None = None
    samples_total: int = 0
    # The sampling interval in force and why: configured, default or training.
    sampling_interval_s: float | None = None
    sampling_interval_reason: str = ""
    config_reloads: Mapping[str, int] = field(default_factory=dict)  # by result
    # Settings the configuration files change that keep their old values until a restart.
    config_restart_required: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExporterSnapshot:
    gpus: tuple[GpuState, ...] = ()
    pipelines: tuple[PipelineState, ...] = ()
    recommendations: tuple[ActiveRecommendation, ...] = ()
    receivers: tuple[ReceiverStats, ...] = ()
    health: Health = field(default_factory=Health)
    version: str = ""
    engine_loads: tuple[EngineLoadState, ...] = ()
    changes: tuple[PipelineChangeState, ...] = ()
    engine_settings: tuple[EngineSettingState, ...] = ()
    live_changes: tuple[LiveChangeCount, ...] = ()
    alert_state_saved: bool = True  # the alert dispatcher's firing state is on disk, current


def pipeline_state(
    pipeline: str,
    diagnosis: Diagnosis,
    *,
    bubble_energy_joules_total: float = 0.0,
    topology: Topology | None = None,
    engine: EngineConfig | None = None,
) -> PipelineState:
    """The exporter's view of a Diagnosis (evidence keys: see detect.types.EVIDENCE_KEYS)."""
    ev = diagnosis.evidence
    return PipelineState(
        pipeline=pipeline,
        verdict=diagnosis.verdict,
        confidence=diagnosis.confidence,
        stages=tuple(
            StageState(
                s.stage,
                _finite(s.occupancy_ratio),
                _finite(s.lag_s),
                _finite(s.extra.get("busy_s_per_step")),
            )
            for s in diagnosis.stages
        ),
        concurrency=_finite(ev.get("concurrency")),
        bubble_ratio=_finite(ev.get("bubble_ratio")),
        bubble_energy_joules_total=bubble_energy_joules_total,
        pp_size=topology.pp_size if topology else len(diagnosis.stages),
        tp_size=topology.tp_size if topology else 0,
        interconnect=(topology.interconnect or "") if topology else "",
        engine=engine,
        load_limited=diagnosis.load_limited,
        measured_bubble_ratio=_finite(ev.get("measured_bubble_ratio")),
        step_period_s=_finite(ev.get("step_period_s")),
    )


class BubbleEnergyIntegrator:
    """Turns per-window bubble energy (overlapping sliding windows) into a running total.

    Each analysis covers `window_s`; only the part not covered by the previous
    analysis is new, so the total grows by energy * min(dt, window) / window.
    """

    def __init__(self) -> None:
        self._last_end_s: float | None = None
        self.total_j = 0.0

    def add(self, window_end_s: float, window_s: float, energy_j: float | None) -> float:
        if energy_j is None or not math.isfinite(energy_j) or window_s <= 0:
            self._last_end_s = window_end_s
            return self.total_j
        new_s = window_s if self._last_end_s is None else window_end_s - self._last_end_s
        new_s = min(max(new_s, 0.0), window_s)
        self.total_j += max(energy_j, 0.0) * new_s / window_s
        self._last_end_s = window_end_s
        return self.total_j


def _finite(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None
