"""vLLM's V1 engine core with pipeline parallelism (`step_with_batch_queue`).

The engine keeps a queue of at most `max_concurrent_batches` batches in
flight, as the release modelled (`Scenario.engine_version`) computes it
from the stages, async scheduling and the model runner
(bubblewatch.engines.vllm.batches: `pp_size + 1` with async scheduling and
the V2 runner from 0.23, `pp_size` before or without them, 2 with one stage
and async scheduling). Each step
schedules a new batch while the queue has room: every running request not
already in flight (one decode token each) and prefill chunks of waiting
requests, within `max_num_seqs` and the token budget; a request in flight
has nothing new to schedule (`num_new_tokens == 0`). When nothing can be
scheduled or the queue is full it blocks on the oldest batch. No flag sets
the number of batches directly: requests that arrive together share one
batch and the pipeline fills only as their arrivals spread out.
"""

from __future__ import annotations

import math
from collections import deque

from bubblewatch.sim.serving import (
    Batch,
    Client,
    History,
    Pipeline,
    ReplicaTrace,
    Req,
    apply_result,
    finish_trace,
)
from bubblewatch.sim.spec import Scenario


def _schedule(
    running: list[Req], busy: set[int], waiting: list[Req], *, max_seqs: int, budget: int
) -> Batch | None:
    items: list[tuple[Req, int]] = []
    ctx = 0
    left = budget
    prefill = False
    for r in running:
        if id(r) in busy or left <= 0:
            continue
        take = min(r.prompt_left, left) if r.prompt_left > 0 else 1
        prefill |= r.prompt_left > 0
        items.append((r, take))
        ctx += r.ctx + take
        left -= take
    while waiting and len(running) < max_seqs and left > 0:
        r = waiting.pop(0)
        running.append(r)
        take = min(r.prompt_left, left)
        items.append((r, take))
        ctx += take
        left -= take
        prefill = True
    if not items:
        return None
    return Batch(items, prefill=prefill, n_tok=budget - left, ctx=ctx)


def run_vllm(sc: Scenario, pipe: Pipeline, client: Client, duration_s: float) -> ReplicaTrace:
    par, host = sc.parallel, sc.hardware.host
    queue_max = par.vllm_in_flight(sc.engine_version, sc.engine_argv).batches
    running: list[Req] = []
    waiting: list[Req] = []
    busy: set[int] = set()
    queue: deque[Batch] = deque()
    hist = History()
    t = 0.0
    while t <= duration_s:
        waiting.extend(client.arrived(t))
        if not waiting and not running and not queue:
            nxt = client.next_event_s()
            if not math.isfinite(nxt) or nxt > duration_s:
                break
            t = max(t, nxt)
            continue
        batch = None
        if len(queue) < queue_max:
            batch = _schedule(
                running,
                busy,
                waiting,
                max_seqs=par.max_running_requests,
                budget=sc.workload.chunk_size,
            )
        if batch is not None:
            t += host.batch_prep_s
            launched_at = t
            t = pipe.launch(batch, t, overlap_processing=False)
            busy.update(id(r) for r, _ in batch.items)
            queue.append(batch)
            hist.flight(launched_at, len(queue))
            hist.micro_batches += 1
            if not batch.prefill:
                hist.decode_tokens += batch.n_tok
                hist.decode_batches += 1
            if len(queue) < queue_max:
                hist.load(t, len(running), len(waiting))
                continue
        if not queue:
            t = max(t + host.empty_iteration_s, min(client.next_event_s(), duration_s + 1.0))
            continue
        oldest = queue.popleft()
        t = max(t, oldest.done_s) + host.step_overhead_s
        busy.difference_update(id(r) for r, _ in oldest.items)
        done = apply_result(oldest, hist, t)
        if done:
            gone = {id(r) for r in done}
            running[:] = [r for r in running if id(r) not in gone]
            client.finished(t, done)
        hist.flight(t, len(queue))
        hist.load(t, len(running), len(waiting))
    return finish_trace(pipe, hist, cap=par.max_running_requests, slots=queue_max)
