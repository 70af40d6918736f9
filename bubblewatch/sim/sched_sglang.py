"""SGLang's pipeline-parallel scheduler, as its `event_loop_pp` runs it (0.5.7-0.5.23).

This is the event loop; its policy numbers (slots, the default per-slot cap)
are SGLang's package's (bubblewatch.engines.sglang.scheduler).

Rank 0's scheduler cycles over `pp_loop_size = pp_size + pp_async_batch_depth`
micro-batch slots (`scheduler_pp_mixin.py`); each slot keeps its own running
batch. At slot m's turn the scheduler:

1. takes the requests that arrived since the last turn (`recv_requests`);
2. forms slot m's next micro-batch: a prefill of waiting requests if any may
   join (up to the per-slot cap `pp_max_micro_batch_size`, default
   `max(max_running_requests // pp_size, 1)`, and the prefill token budget;
   the request that does not fit whole becomes the chunked request, whose next
   chunk is taken at the next slot's turn), else one decode step of the
   slot's running requests;
3. launches it on stage 0, and exchanges outputs: it receives the result of
   slot m+1's previous micro-batch and processes it (`process_batch_result`).
   With depth 0 the exchange is queued after the forward, so processing waits
   for stage 0's GPU; with depth > 0 it comes first (`_pp_exchange_outputs_
   before_forward`) and processing overlaps the forward.

With `pp_size > 1` its `sglang:num_running_reqs` gauge counts one micro-batch,
not all running requests (`scheduler_metrics_mixin.py`): a prefill sets it to
the slot's running batch (`running_bs`), every `decode_log_interval`-th decode
result (40) to that micro-batch's requests, an idle turn to 0. The trace's
`micro_batch` holds that gauge.

So how many micro-batches are in flight is set by how many slots hold
requests: requests that arrive together all join the first slot whose turn
comes (up to the cap), leaving one micro-batch in flight whatever the depth.
With `pp_size == 1` (no pipeline) SGLang's overlap scheduler hides the CPU
work behind the forward, as `ParallelSpec.overlaps_cpu` says.
"""

from __future__ import annotations

import math

from bubblewatch.engines.sglang.scheduler import micro_batch_slots
from bubblewatch.sim.serving import (
    Batch,
    Client,
    History,
    Pipeline,
    ReplicaTrace,
    Req,
    apply_result,
    finish_trace,
    form_prefill,
)
from bubblewatch.sim.spec import Scenario

# SGLang's --decode-log-interval default: every 40th decode result is logged.
DECODE_LOG_INTERVAL = 40


class _Slots:
    """The slots' running batches, what waits, and the one chunked request."""

    def __init__(self, n: int) -> None:
        self.running: list[list[Req]] = [[] for _ in range(n)]
        self.in_flight: list[Batch | None] = [None] * n
        self.waiting: list[Req] = []
        self.chunked: Req | None = None
        self.admitted = 0  # requests past admission (prefilling or decoding)
        self.gauge = 0.0  # sglang:num_running_reqs: the last logged micro-batch's requests
        self.decodes = 0  # decode results processed (SGLang's forward_ct_decode)


def _next_batch(
    s: _Slots, m: int, *, cap: int, max_running: int, budget: int, max_prefill: int | None
) -> Batch | None:
    """Slot m's micro-batch at its turn: a prefill first, else a decode step.

    `max_prefill` (--prefill-max-requests) stops a prefill batch at that many
    requests, the chunked one included, as `PrefillAdder.add_one_req` does.
    """
    room = min(cap - len(s.running[m]), max_running - s.admitted)
    if s.chunked is not None or (s.waiting and room > 0):
        cands: list[Req] = []
        if s.chunked is not None:
            cands.append(s.chunked)
        take = max(room - len(cands), 0)
        if max_prefill is not None:
            take = min(take, max(max_prefill - len(cands), 0))
        new = s.waiting[:take]
        cands.extend(new)
        items, n_tok, ctx = form_prefill(cands, budget)
        if items:
            s.gauge = len(s.running[m])  # log_prefill_stats: the slot's running batch
            taken = {id(r) for r, _ in items}
            joined = [r for r in new if id(r) in taken]
            del s.waiting[: len(joined)]
            s.admitted += len(joined)
            last, take = items[-1]
            s.chunked = last if take < last.prompt_left else None
            return Batch(items, prefill=True, n_tok=n_tok, ctx=ctx)
    reqs = s.running[m]
    if not reqs:
        return None
    return Batch(
        [(r, 1) for r in reqs], prefill=False, n_tok=len(reqs), ctx=sum(r.ctx for r in reqs)
    )


def _process(s: _Slots, slot: int, batch: Batch, hist: History, t: float) -> list[Req]:
    """The result of `slot`'s micro-batch: prefilled requests join the slot, finished leave."""
    done = apply_result(batch, hist, t)
    if not batch.prefill:
        s.decodes += 1
        if s.decodes % DECODE_LOG_INTERVAL == 0:  # log_decode_stats(running_batch=batch)
            s.gauge = len(batch.items)
    if batch.prefill:
        for r, _ in batch.items:
            if r.prompt_left == 0 and r.out_left > 0 and r is not s.chunked:
                s.running[slot].append(r)
    if done:
        gone = {id(r) for r in done}
        s.running[slot] = [r for r in s.running[slot] if id(r) not in gone]
        s.admitted -= len(done)
    return done


def run_sglang(sc: Scenario, pipe: Pipeline, client: Client, duration_s: float) -> ReplicaTrace:
    par, host = sc.parallel, sc.hardware.host
    depth = par.pp_async_batch_depth if par.pp_size > 1 else 0
    n_slots = micro_batch_slots(par.pp_size, depth)  # the engine package's policy
    cap = par.micro_batch_cap
    overlap = par.overlaps_cpu(sc.engine)
    empty_s = max(host.empty_iteration_s, 1e-6)
    s = _Slots(n_slots)
    hist = History()

    def gauge(s: _Slots) -> float:
        return s.gauge if par.pp_size > 1 else math.nan  # one stage: all running requests

    in_flight = 0
    t = 0.0
    m = 0
    while t <= duration_s:
        s.waiting.extend(client.arrived(t))
        if not s.waiting and s.chunked is None and s.admitted == 0 and in_flight == 0:
            s.gauge = 0.0  # self_check_during_idle: the (empty) running batch
            hist.load(t, 0, 0, gauge(s))
            nxt = client.next_event_s()
            if not math.isfinite(nxt) or nxt > duration_s:
                break
            t = max(t, nxt)
            continue
        batch = _next_batch(
            s,
            m,
            cap=cap,
            max_running=par.max_running_requests,
            budget=sc.workload.chunk_size,
            max_prefill=par.prefill_max_requests,
        )
        t += (0.0 if overlap else host.batch_prep_s) if batch is not None else empty_s
        nxt_slot = (m + 1) % n_slots
        pending = s.in_flight[nxt_slot]
        if depth > 0 and pending is not None:
            t = max(t, pending.done_s)  # outputs exchanged before the forward
        if batch is not None:
            launched_at = t
            t = pipe.launch(batch, t, overlap_processing=depth > 0)
            s.in_flight[m] = batch
            in_flight += 1
            hist.flight(launched_at, in_flight)
            hist.micro_batches += 1
            if not batch.prefill:
                hist.decode_tokens += batch.n_tok
                hist.decode_batches += 1
            pending = s.in_flight[nxt_slot]  # the slot itself when there is one slot
        if pending is not None:
            wait = pending.done_s
            if depth == 0 and batch is not None:
                wait = max(wait, batch.stage0_end_s)  # the result's copy queues behind the forward
            if overlap:
                # The overlap scheduler prepares the next batch during this forward.
                forward_s = pending.stage0_end_s - pending.stage0_start_s
                cpu_s = host.batch_prep_s + host.step_overhead_s
                t = max(t, wait) + max(0.0, cpu_s - forward_s)
            else:
                t = max(t, wait) + host.step_overhead_s
            done = _process(s, nxt_slot, pending, hist, t)
            s.in_flight[nxt_slot] = None
            in_flight -= 1
            hist.flight(t, in_flight)
            if done:
                client.finished(t, done)
        hist.load(t, s.admitted, len(s.waiting), gauge(s))
        m = nxt_slot
    return finish_trace(pipe, hist, cap=cap, slots=n_slots)
