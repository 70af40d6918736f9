"""One pipeline's periodic analysis: detector, rules with `for` hold times, bubble energy.

`PipelineAnalyzer.step(window, now)` is a function of its inputs plus the
state it carries between windows (how long each rule's condition has held,
the bubble-energy total, the compute SM level each GPU showed when a window
resolved it: a later window that cannot see it takes it instead of assuming
one, so the bubble does not jump with what one window happens to show); it
does no I/O and reads no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bubblewatch.analysis import Target, diagnose_window, judge, training_schedule
from bubblewatch.detect import DetectOptions, Diagnosis
from bubblewatch.detect.levels import LEVELS_TO_KEEP
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology
from bubblewatch.rules import Recommendation, RuleEngine
from bubblewatch.rules.load_peak import DEFAULT_HORIZON_S, PeakTracker, peak_for
from bubblewatch.sinks.snapshot import BubbleEnergyIntegrator
from bubblewatch.sources.engine_state import LiveState
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.single_process import SingleProcessJob, layer_placement


@dataclass(frozen=True)
class Pipeline:
    """A pipeline the daemon analyses: its id (the `pipeline` label), topology and engine."""

    id: str
    topology: Topology | None
    engine: EngineConfig | None = None
    metrics_url: str | None = None  # the engine's Prometheus endpoint, for its load
    first_stage: int = 0  # global index of its first stage (pipelines across hosts)
    # No engine: one process holding several of the GPUs (topology/single_process.py), said
    # in words; its GPUs taking turns may then be judged a layer split.
    single_process: str | None = None
    process: SingleProcessJob | None = None  # that process, where it is the only one


@dataclass(frozen=True)
class PipelineResult:
    pipeline: Pipeline
    diagnosis: Diagnosis
    recommendations: tuple[Recommendation, ...]
    bubble_energy_joules_total: float
    failures: tuple[str, ...] = ()


@dataclass
class PipelineAnalyzer:
    """Carries one pipeline's state from window to window."""

    pipeline: Pipeline
    _since_s: dict[str, float] = field(default_factory=dict)
    _energy: BubbleEnergyIntegrator = field(default_factory=BubbleEnergyIntegrator)
    _sm_levels: dict[int, float] = field(default_factory=dict)
    # Load peaks of the windows of the last `peak_horizon_s` (analysis.peak_horizon):
    # limits are sized for the busiest one.
    peak_horizon_s: float = DEFAULT_HORIZON_S
    _peaks: PeakTracker = field(init=False)

    def __post_init__(self) -> None:
        self._peaks = PeakTracker(self.peak_horizon_s)

    def set_peak_horizon(self, horizon_s: float) -> None:
        """A reloaded analysis.peak_horizon: the peaks kept are judged by the new one."""
        self.peak_horizon_s = self._peaks.horizon_s = horizon_s

    def reset_holds(self) -> None:
        """Forget how long rules have held and the levels learned (the engine restarted:
        old evidence is void)."""
        self._since_s.clear()
        self._sm_levels.clear()

    def _keep_levels(self, diag: Diagnosis) -> None:
        """The compute SM levels this window resolved (learned, plateau, model), per GPU."""
        sources, levels = (
            diag.evidence.get("compute_level_source"),
            diag.evidence.get("compute_sm_active_by_gpu"),
        )
        if not isinstance(sources, dict) or not isinstance(levels, dict):
            return
        for gpu, src in sources.items():
            level = levels.get(gpu)
            if src in LEVELS_TO_KEEP and isinstance(level, (int, float)):
                self._sm_levels[int(gpu)] = float(level)

    def step(
        self,
        window: Recording,
        rules: RuleEngine,
        now_s: float,
        *,
        gpus: Sequence[GpuInfo] = (),
        live: LiveState | None = None,
    ) -> PipelineResult:
        """Diagnose `window` and evaluate the rules; `now_s` is the Unix time of the analysis.

        `live`: the engine's settings read back from it (joined over its command line's).
        """
        topo = self.pipeline.topology
        # No engine discovered and no topology: never a pipeline verdict (nor alert) on a
        # stagger alone; job findings (collective wait, underfed, idle) still come. GPUs
        # taking turns are a layer split where discovery saw one process hold them.
        unknown = topo is None and self.pipeline.engine is None
        split = self.pipeline.single_process is not None
        job = self.pipeline.process
        placed = None if job is None else layer_placement(job)
        opts = (
            DetectOptions(
                infer_pipelines=False,
                infer_layer_split=split,
                layer_order=() if placed is None else placed.order,
                layer_order_resolved=placed is not None and placed.resolved,
            )
            if unknown
            else None
        )
        engine = self.pipeline.engine
        target = Target(topo, engine, training_schedule(engine))
        diag = diagnose_window(window, target, options=opts, known_sm_levels=self._sm_levels)
        self._keep_levels(diag)
        end_s = window.end_s if math.isfinite(window.end_s) else now_s
        energy = diag.evidence.get("bubble_energy_j")
        total = self._energy.add(
            end_s,
            diag.window_s,
            float(energy) if isinstance(energy, (int, float)) else None,
        )
        held = {name: now_s - t for name, t in self._since_s.items()}
        peak = self._peaks.add(end_s, peak_for(diag, window.load))
        ev = judge(
            diag,
            target,
            rules=rules.rules,
            gpus=gpus,
            held_s=held,
            live=live,
            peak=peak,
            process=job if unknown else None,
        ).evaluation
        matched = set(ev.matched)
        for name in matched:
            self._since_s.setdefault(name, now_s)
        for name in [n for n in self._since_s if n not in matched]:
            del self._since_s[name]
        return PipelineResult(
            self.pipeline,
            diag,
            ev.recommendations,
            total,
            tuple(f"{f.rule} ({f.where}): {f.error}" for f in ev.failures),
        )
