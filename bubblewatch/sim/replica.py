"""One serving replica simulated: the client, the pipeline and the engine's scheduler loop.

The loops (`sched_sglang`, `sched_vllm`) play their engine's scheduler policy
(bubblewatch.engines) over the shared model of `sim.engine`; this module picks
the loop by the scenario's engine, so neither side imports the other back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from bubblewatch.sim.sched_sglang import run_sglang
from bubblewatch.sim.sched_vllm import run_vllm
from bubblewatch.sim.serving import Client, Pipeline, ReplicaTrace, Req
from bubblewatch.sim.spec import Scenario

__all__ = ["LOOPS", "run_replica"]

# One scheduler loop per engine the simulator plays (sim.spec.ENGINES).
LOOPS: dict[str, Callable[[Scenario, Pipeline, Client, float], ReplicaTrace]] = {
    "sglang": run_sglang,
    "vllm": run_vllm,
}


def run_replica(
    sc: Scenario,
    stage_gpus: tuple[tuple[int, ...], ...],
    concurrency_phases: list[tuple[float, int]],
    duration_s: float,
    rng: np.random.Generator,
) -> ReplicaTrace:
    """Simulate one replica for `duration_s` under a closed-loop client."""
    client = Client(sc, concurrency_phases, rng)
    pipe = Pipeline(sc, stage_gpus)
    trace = LOOPS[sc.engine](sc, pipe, client, duration_s)
    return _with_unfinished(trace, client.unfinished(), duration_s)


def _with_unfinished(trace: ReplicaTrace, open_reqs: list[Req], end_s: float) -> ReplicaTrace:
    """The latency figures with each unfinished request's time so far (lower bounds)."""
    if not open_reqs:
        return trace
    waited = np.array([end_s - r.arrived_s for r in open_reqs])
    no_token = np.array([math.isnan(r.last_token_s) for r in open_reqs])
    return replace(
        trace,
        ttft_s=np.concatenate([trace.ttft_s, waited[no_token]]),
        e2e_s=np.concatenate([trace.e2e_s, waited]),
    )
