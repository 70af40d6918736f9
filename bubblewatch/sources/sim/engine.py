"""The discrete-event model of one serving engine replica (one pipeline).

Micro-batches enter stage 0 and visit the stages in order; each stage runs one
micro-batch at a time, first in first out, so a micro-batch's whole path can be
computed when it is launched. The event queue only holds completions (the
sampled token is back at the scheduler) and load-schedule changes. The loop is
Python; everything downstream of it (binning, power, observation) is numpy.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.sources.sim.costs import CostModel
from bubblewatch.sources.sim.spec import FaultSpec, Scenario

FloatArray = npt.NDArray[np.float64]

_PHASE = 0
_COMPLETE = 1
_TRY = 2


class _Req:
    __slots__ = ("ctx", "out_left", "prompt_left", "slot")

    def __init__(self, prompt: int, out: int) -> None:
        self.prompt_left = prompt
        self.out_left = out
        self.ctx = 0
        self.slot = -1


@dataclass(frozen=True)
class StageTrace:
    """Compute intervals of one stage, with how each interval's time splits."""

    start_s: FloatArray
    end_s: FloatArray
    gpu_s: FloatArray
    comm_s: FloatArray
    launch_s: FloatArray
    prefill: npt.NDArray[np.bool_]
    allreduce_bytes: FloatArray
    send_start_s: FloatArray  # activation sends to the next stage
    send_end_s: FloatArray
    send_bytes: FloatArray


@dataclass(frozen=True)
class ReplicaTrace:
    """Everything the replica did: per-stage intervals, load and in-flight history, tokens."""

    stages: tuple[StageTrace, ...]
    load_t_s: FloatArray  # step functions: value holds from t until the next t
    running: FloatArray
    queued: FloatArray
    in_flight_t_s: FloatArray
    in_flight: FloatArray
    tokens: int
    micro_batches: int
    decode_tokens_per_micro_batch: float
    max_in_flight: int
    micro_batch_cap: int


def _clock_fn(faults: list[FaultSpec]) -> list[tuple[float, float, float]]:
    return [(f.start_s, f.end_s, f.clock_ratio) for f in faults]


def run_replica(
    sc: Scenario,
    stage_gpus: tuple[tuple[int, ...], ...],
    concurrency_phases: list[tuple[float, int]],
    duration_s: float,
    rng: np.random.Generator,
) -> ReplicaTrace:
    """Simulate one replica for `duration_s` under a closed-loop client."""
    par, host, wl = sc.parallel, sc.hardware.host, sc.workload
    cost = CostModel(sc)
    n_stages = par.pp_size
    layers = sc.stage_layers
    k_max = par.max_in_flight(sc.engine)
    mb_cap = par.micro_batch_cap
    max_running = par.max_running_requests
    eager = not par.cuda_graph
    prep_s = host.batch_prep_s
    hop_s = host.pp_hop_s
    step_s = host.step_overhead_s
    if par.overlaps_cpu(sc.engine):
        # Scheduling and batch preparation run on the CPU while the GPU computes the
        # previous batch; only the part that outlasts the forward shows (see docs).
        overlap_budget = step_s + prep_s
        step_s = prep_s = 0.0
    else:
        overlap_budget = 0.0
    return_s = sc.hardware.interconnect.latency_s if n_stages > 1 else 0.0
    stage_faults = [_clock_fn([f for f in sc.faults if f.gpu in gpus]) for gpus in stage_gpus]
    any_fault = any(stage_faults)

    # Per-stage interval columns (lists grow; converted to arrays at the end).
    cols: list[list[list[float]]] = [[[] for _ in range(10)] for _ in range(n_stages)]
    gpu_free = [0.0] * n_stages
    cpu_free = [0.0] * n_stages

    n_slots = k_max
    slots: list[list[_Req]] = [[] for _ in range(n_slots)]
    slot_busy = [False] * n_slots
    slot_ready = [0.0] * n_slots
    waiting: list[_Req] = []
    running = 0
    outstanding = 0
    target = 0
    in_flight = 0
    tokens = 0
    n_mb = 0
    decode_tokens = 0
    decode_mbs = 0
    load_t: list[float] = [0.0]
    load_run: list[float] = [0.0]
    load_q: list[float] = [0.0]
    fl_t: list[float] = [0.0]
    fl_v: list[float] = [0.0]

    jitter = wl.length_jitter_ratio

    def new_request() -> _Req:
        if jitter > 0:
            a, b = rng.uniform(1.0 - jitter, 1.0 + jitter, size=2)
            return _Req(max(1, round(wl.input_tokens * a)), max(1, round(wl.output_tokens * b)))
        return _Req(wl.input_tokens, wl.output_tokens)

    def note_load(t: float) -> None:
        if load_t[-1] == t:
            load_run[-1] = running
            load_q[-1] = len(waiting)
        else:
            load_t.append(t)
            load_run.append(running)
            load_q.append(len(waiting))

    def note_flight(t: float) -> None:
        if fl_t[-1] == t:
            fl_v[-1] = in_flight
        else:
            fl_t.append(t)
            fl_v.append(in_flight)

    def admit(t: float) -> None:
        nonlocal outstanding, running
        while outstanding < target:
            waiting.append(new_request())
            outstanding += 1
        while waiting and running < max_running:
            best = min(range(n_slots), key=lambda i: (len(slots[i]), i))
            if len(slots[best]) >= mb_cap:
                break
            r = waiting.pop(0)
            r.slot = best
            slots[best].append(r)
            running += 1
        note_load(t)

    def clock_at(s: int, t: float) -> float:
        ratio = 1.0
        for a, b, c in stage_faults[s]:
            if a <= t < b and c < ratio:
                ratio = c
        return ratio

    def launch(slot: int, t: float) -> float:
        """Send the slot's next micro-batch through the pipeline; returns completion time."""
        nonlocal in_flight, n_mb, decode_tokens, decode_mbs
        reqs = slots[slot]
        pre = [r for r in reqs if r.prompt_left > 0]
        if pre:
            budget = wl.chunk_size
            items: list[tuple[_Req, int]] = []
            ctx = 0
            for r in pre:
                take = min(r.prompt_left, budget)
                items.append((r, take))
                ctx += r.ctx + take
                budget -= take
                if budget == 0:
                    break
            n_tok = wl.chunk_size - budget
            prefill = True
        else:
            items = [(r, 1) for r in reqs]
            n_tok = len(items)
            ctx = sum(r.ctx for r in reqs)
            prefill = False
            decode_tokens += n_tok
            decode_mbs += 1
        lc = cost.layer(prefill=prefill, tokens=n_tok, context_tokens=ctx)
        ar_bytes_layer = lc.allreduce_bytes
        send = cost.send_s(n_tok) if n_stages > 1 else 0.0
        send_bytes = cost.send_bytes(n_tok)
        ready = t
        done = t
        for s in range(n_stages):
            c0 = ready if ready > cpu_free[s] else cpu_free[s]
            prep_end = c0 + prep_s + (hop_s if s else 0.0)
            g0 = prep_end if prep_end > gpu_free[s] else gpu_free[s]
            nl = layers[s]
            gpu_s = nl * lc.gpu_s
            if any_fault and stage_faults[s]:
                gpu_s /= clock_at(s, g0)
            comm_s = nl * lc.comm_s
            launch_s = nl * lc.launch_s
            g1 = g0 + gpu_s + comm_s + launch_s
            gpu_free[s] = g1
            cpu_free[s] = g1 if (eager or prefill) else prep_end
            col = cols[s]
            col[0].append(g0)
            col[1].append(g1)
            col[2].append(gpu_s)
            col[3].append(comm_s)
            col[4].append(launch_s)
            col[5].append(1.0 if prefill else 0.0)
            col[6].append(nl * ar_bytes_layer)
            if s < n_stages - 1:
                col[7].append(g1)
                col[8].append(g1 + send)
                col[9].append(send_bytes)
                ready = g1 + send
            else:
                done = g1 + return_s
        pending[slot] = items
        last_forward_s[slot] = done - t
        in_flight += 1
        n_mb += 1
        note_flight(t)
        return done

    pending: list[list[tuple[_Req, int]]] = [[] for _ in range(n_slots)]
    last_forward_s = [0.0] * n_slots
    events: list[tuple[float, int, int, int]] = []
    seq = 0
    for start, conc in concurrency_phases:
        heapq.heappush(events, (start, seq, _PHASE, conc))
        seq += 1

    def try_launch(t: float) -> None:
        nonlocal seq
        while in_flight < k_max:
            best = -1
            for i in range(n_slots):
                if (
                    not slot_busy[i]
                    and slots[i]
                    and slot_ready[i] <= t
                    and (best < 0 or slot_ready[i] < slot_ready[best])
                ):
                    best = i
            if best < 0:
                return
            slot_busy[best] = True
            done = launch(best, t)
            heapq.heappush(events, (done, seq, _COMPLETE, best))
            seq += 1

    while events:
        t, _, kind, arg = heapq.heappop(events)
        if t > duration_s:
            break
        if kind == _PHASE:
            target = arg
            admit(t)
        elif kind == _COMPLETE:
            slot = arg
            slot_busy[slot] = False
            in_flight -= 1
            note_flight(t)
            finished = 0
            for r, take in pending[slot]:
                if r.prompt_left > 0:
                    r.prompt_left -= take
                    r.ctx += take
                    if r.prompt_left > 0:
                        continue
                r.out_left -= 1
                r.ctx += 1
                tokens += 1
                if r.out_left <= 0:
                    slots[slot].remove(r)
                    finished += 1
            pending[slot] = []
            if finished:
                running -= finished
                outstanding -= finished
            admit(t)
            gap = step_s
            if overlap_budget > 0.0:
                gap = max(0.0, overlap_budget - last_forward_s[slot])
            slot_ready[slot] = t + gap
            heapq.heappush(events, (t + gap, seq, _TRY, slot))
            seq += 1
        try_launch(t)

    stages = tuple(_stage_trace(c) for c in cols)
    return ReplicaTrace(
        stages=stages,
        load_t_s=np.asarray(load_t),
        running=np.asarray(load_run),
        queued=np.asarray(load_q),
        in_flight_t_s=np.asarray(fl_t),
        in_flight=np.asarray(fl_v),
        tokens=tokens,
        micro_batches=n_mb,
        decode_tokens_per_micro_batch=decode_tokens / decode_mbs if decode_mbs else 0.0,
        max_in_flight=k_max,
        micro_batch_cap=mb_cap,
    )


def _stage_trace(c: list[list[float]]) -> StageTrace:
    a = [np.asarray(x, dtype=np.float64) for x in c]
    return StageTrace(
        start_s=a[0],
        end_s=a[1],
        gpu_s=a[2],
        comm_s=a[3],
        launch_s=a[4],
        prefill=a[5] > 0.5,
        allreduce_bytes=a[6],
        send_start_s=a[7],
        send_end_s=a[8],
        send_bytes=a[9],
    )
