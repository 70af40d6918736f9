"""One serving replica run: the closed-loop client, the pipeline and the engine's scheduler.

The scheduler is the engine's own (`sched_sglang`, `sched_vllm`); what they
share (requests, client, pipeline, history) is in serving.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from bubblewatch.sim.sched_sglang import run_sglang
from bubblewatch.sim.sched_vllm import run_vllm
from bubblewatch.sim.serving import Client, Pipeline, ReplicaTrace, Req
from bubblewatch.sim.spec import Scenario


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
    if sc.engine == "vllm":
        trace = run_vllm(sc, pipe, client, duration_s)
    else:
        trace = run_sglang(sc, pipe, client, duration_s)
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
