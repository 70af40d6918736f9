"""One analysis round: each pipeline's last window from the ring through detector and rules.

A pipeline's window starts no earlier than its `valid_from` (an engine restart
or its arrival), holds its topology's GPUs and, on live GPUs, its engine's
load. Each result is also shown to the change watch, which judges an engine
change once a full window after it exists.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from bubblewatch.daemon.pipelines.analyzer import PipelineResult
from bubblewatch.daemon.pipelines.change import ChangeOutcome
from bubblewatch.daemon.pipelines.tracker import PipelineTracker
from bubblewatch.daemon.ring import RingBuffer
from bubblewatch.daemon.sources.engineload import EngineLoads
from bubblewatch.daemon.sources.enginestate import EngineStates
from bubblewatch.detect import Verdict
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.rules import RuleEngine

log = logging.getLogger("bubblewatch.daemon")

# Below this confidence the sampler bursts (where the source can) to firm up the next window.
BURST_BELOW_CONFIDENCE = 0.5


def analyze_pipelines(
    ring: RingBuffer,
    tracker: PipelineTracker,
    loads: EngineLoads | None,
    rules: RuleEngine,
    now_wall: float,
    *,
    end: float,
    window_s: float,
    gpus: Sequence[GpuInfo],
    states: EngineStates | None = None,
) -> list[PipelineResult]:
    """Every tracked pipeline's diagnosis and rules over the window ending at `end`.

    `states`: the engines' live settings, joined into the facts over their command lines'.
    """
    stop = float(np.nextafter(end, math.inf))
    results: list[PipelineResult] = []
    for pid, analyzer in tracker.analyzers.items():
        start = max(end - window_s, tracker.valid_from.get(pid, -math.inf))
        topo = analyzer.pipeline.topology
        window = ring.recording(
            start, stop, topology=topo, gpus=None if topo is None else topo.gpus
        )
        load = loads.series(pid, start, stop) if loads is not None else None
        if load is not None:
            window = replace(window, load=load)
        live = states.latest(pid, now_wall) if states is not None else None
        res = analyzer.step(window, rules, now_wall, gpus=gpus, live=live)
        outcome = tracker.changes.observe(res, end, window_s)
        if outcome is not None:
            _log_change(outcome)
        for f in res.failures:
            log.warning(
                "rule could not be evaluated",
                extra={"kv": {"pipeline": pid, "failure": f}, "ratelimit_key": f"rule:{f}"},
            )
        results.append(res)
    return results


def unsure(results: Sequence[PipelineResult]) -> bool:
    """A diagnosis below BURST_BELOW_CONFIDENCE (other than too little data): sample faster."""
    return any(
        r.diagnosis.confidence < BURST_BELOW_CONFIDENCE
        and r.diagnosis.verdict is not Verdict.INSUFFICIENT_DATA
        for r in results
    )


def _log_change(outcome: ChangeOutcome) -> None:
    """One line per judged engine change: before/after verdicts and figures, borne out."""
    level = logging.WARNING if outcome.borne_out is False else logging.INFO
    log.log(level, "engine change compared", extra={"kv": outcome.log_fields()})
