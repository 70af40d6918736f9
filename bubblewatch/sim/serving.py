"""The discrete-event model of one serving engine replica (one pipeline).

A scheduler (`sched_sglang`, `sched_vllm`) decides which requests form each
micro-batch and when it is launched; this module holds what they share: the
requests and the closed-loop client that sends them (`Client`), and the
pipeline of stages (`Pipeline`). Stages are FIFO servers, so a micro-batch's
whole path is computed when it is launched; each stage's rank prepares the
batch on its CPU, computes on its GPU, and (graphs off, or prefill) keeps its
CPU busy issuing kernels meanwhile. The loops are Python; everything
downstream of them (binning, power, observation) is numpy.
"""

from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from bubblewatch.sim.costs import CostModel
from bubblewatch.sim.spec import FaultSpec, Scenario

FloatArray = npt.NDArray[np.float64]


class Req:
    """One request: prompt tokens still to prefill, output tokens still to produce.

    `arrived_s` is when it reached the scheduler, `last_token_s` when its last
    token was processed (NaN before the first): the latency figures come from them.
    """

    __slots__ = ("arrived_s", "ctx", "last_token_s", "out_left", "prompt_left")

    def __init__(self, prompt: int, out: int, arrived_s: float = 0.0) -> None:
        self.prompt_left = prompt
        self.out_left = out
        self.ctx = 0
        self.arrived_s = arrived_s
        self.last_token_s = math.nan


@dataclass
class Batch:
    """One micro-batch: (request, tokens) items, prefill or decode, and its launch record."""

    items: list[tuple[Req, int]]
    prefill: bool
    n_tok: int
    ctx: int
    done_s: float = 0.0  # result back at the scheduler
    stage0_start_s: float = 0.0  # stage 0's GPU starts it
    stage0_end_s: float = 0.0  # stage 0's GPU done with it


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
    micro_batch: FloatArray  # the engine's per-micro-batch gauge, NaN where it counts all
    in_flight_t_s: FloatArray
    in_flight: FloatArray
    tokens: int
    micro_batches: int
    decode_tokens_per_micro_batch: float
    max_in_flight: int  # most micro-batches in flight at once over the run
    micro_batch_cap: int  # SGLang's per-slot cap (vLLM: max_num_seqs)
    slots: int = 1  # micro-batch slots the scheduler cycles over (vLLM: batch queue size)
    # Per request: arrival to first token (TTFT) and to its last (end to end); per token
    # after the first: the gap (ITL). A request unfinished at the end counts with its
    # time so far (a lower bound), so a request starved behind a limit is not left out.
    ttft_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    itl_s: FloatArray = field(default_factory=lambda: np.zeros(0))
    e2e_s: FloatArray = field(default_factory=lambda: np.zeros(0))


@dataclass
class History:
    """Step functions of load and micro-batches in flight, and the counters."""

    # array("d"), not lists: 8 bytes a value, not 32 (an hour holds millions of them)
    load_t: array[float] = field(default_factory=lambda: array("d", [0.0]))
    load_run: array[float] = field(default_factory=lambda: array("d", [0.0]))
    load_q: array[float] = field(default_factory=lambda: array("d", [0.0]))
    # What the engine's running-requests gauge shows where it counts one micro-batch
    # (SGLang with PP), NaN where it counts all running requests.
    load_mb: array[float] = field(default_factory=lambda: array("d", [math.nan]))
    fl_t: array[float] = field(default_factory=lambda: array("d", [0.0]))
    fl_v: array[float] = field(default_factory=lambda: array("d", [0.0]))
    tokens: int = 0
    micro_batches: int = 0
    decode_tokens: int = 0
    decode_batches: int = 0
    max_in_flight: int = 0
    ttft: array[float] = field(default_factory=lambda: array("d"))
    itl: array[float] = field(default_factory=lambda: array("d"))
    e2e: array[float] = field(default_factory=lambda: array("d"))

    def load(self, t: float, running: int, queued: int, micro_batch: float = math.nan) -> None:
        if self.load_t[-1] == t:
            self.load_run[-1], self.load_q[-1], self.load_mb[-1] = running, queued, micro_batch
        else:
            self.load_t.append(t)
            self.load_run.append(running)
            self.load_q.append(queued)
            self.load_mb.append(micro_batch)

    def flight(self, t: float, n: int) -> None:
        self.max_in_flight = max(self.max_in_flight, n)
        if self.fl_t[-1] == t:
            self.fl_v[-1] = n
        else:
            self.fl_t.append(t)
            self.fl_v.append(n)


class Client:
    """A closed-loop client: keeps `concurrency` requests outstanding.

    The first requests of a phase arrive together at its start, or spread
    evenly over `workload.ramp_s`; a finished request is replaced
    `workload.client_delay_s` after the scheduler processed its last token
    (response, client, new request, tokenizer), so replacements arrive
    spread out, each at its own time.
    """

    def __init__(
        self, sc: Scenario, phases: list[tuple[float, int]], rng: np.random.Generator
    ) -> None:
        self.wl = sc.workload
        self.rng = rng
        self.phases = sorted(phases)
        self.target = 0
        self.outstanding = 0
        self._arrivals: list[tuple[float, int]] = []
        self._seq = 0
        self.open: dict[int, Req] = {}  # arrived, not finished (for the latency figures)

    def next_event_s(self) -> float:
        """When something next arrives or a load phase starts (inf: never)."""
        t = self._arrivals[0][0] if self._arrivals else np.inf
        if self.phases:
            t = min(t, self.phases[0][0])
        return float(t)

    def arrived(self, t: float) -> list[Req]:
        """Requests that reached the scheduler by `t`, oldest first."""
        while self.phases and self.phases[0][0] <= t:
            start, conc = self.phases.pop(0)
            self.target = conc
            self._top_up(start, ramp=self.wl.ramp_s)
        out: list[Req] = []
        while self._arrivals and self._arrivals[0][0] <= t:
            at, _ = heapq.heappop(self._arrivals)
            r = self._new(at)
            self.open[id(r)] = r
            out.append(r)
        return out

    def finished(self, t: float, done: list[Req]) -> None:
        """`done` finished at `t`: replace them while below the target."""
        self.outstanding -= len(done)
        for r in done:
            self.open.pop(id(r), None)
        self._top_up(t + self.wl.client_delay_s, ramp=0.0)

    def unfinished(self) -> list[Req]:
        """Requests that reached the scheduler and have not finished."""
        return list(self.open.values())

    def _top_up(self, t: float, *, ramp: float) -> None:
        need = self.target - self.outstanding
        for i in range(max(need, 0)):
            at = t + (ramp * i / need if ramp > 0 and need > 0 else 0.0)
            heapq.heappush(self._arrivals, (at, self._seq))
            self._seq += 1
            self.outstanding += 1

    def _new(self, at: float) -> Req:
        j = self.wl.length_jitter_ratio
        if j > 0:
            a, b = self.rng.uniform(1.0 - j, 1.0 + j, size=2)
            return Req(
                max(1, round(self.wl.input_tokens * a)),
                max(1, round(self.wl.output_tokens * b)),
                at,
            )
        return Req(self.wl.input_tokens, self.wl.output_tokens, at)


class Pipeline:
    """The stages as FIFO servers; `launch` sends one micro-batch through all of them."""

    def __init__(self, sc: Scenario, stage_gpus: tuple[tuple[int, ...], ...]) -> None:
        par, host = sc.parallel, sc.hardware.host
        self.cost = CostModel(sc)
        self.n = par.pp_size
        self.layers = sc.stage_layers
        self.eager = not par.cuda_graph
        self.prep_s = host.batch_prep_s
        self.hop_s = host.pp_hop_s
        self.process_s = host.step_overhead_s
        self.return_s = sc.hardware.interconnect.latency_s if self.n > 1 else 0.0
        self.faults = [_clock_fn([f for f in sc.faults if f.gpu in g]) for g in stage_gpus]
        self.cols: list[list[array[float]]] = [
            [array("d") for _ in range(10)] for _ in range(self.n)
        ]
        self.gpu_free = [0.0] * self.n
        self.cpu_free = [0.0] * self.n

    def launch(self, batch: Batch, t: float, *, overlap_processing: bool) -> float:
        """Launch `batch` at stage 0 at `t` (its CPU prep done); returns stage 0's CPU free time.

        Sets `batch.done_s` (its result back at the scheduler) and `batch.stage0_end_s`.
        On ranks 1.. the rank also processes one result per micro-batch
        (`step_overhead_s`): after its forward, or overlapped with it when
        `overlap_processing` (SGLang's async batch depth).
        """
        lc = self.cost.layer(prefill=batch.prefill, tokens=batch.n_tok, context_tokens=batch.ctx)
        send = self.cost.send_s(batch.n_tok) if self.n > 1 else 0.0
        send_bytes = self.cost.send_bytes(batch.n_tok)
        ready = t
        cpu0 = t
        for s in range(self.n):
            if s == 0:
                prep_end = t
            else:
                c0 = max(ready, self.cpu_free[s])
                prep_end = c0 + self.prep_s + self.hop_s
            g0 = max(prep_end, self.gpu_free[s])
            nl = self.layers[s]
            gpu_s = nl * lc.gpu_s
            if self.faults[s]:
                gpu_s /= _clock_at(self.faults[s], g0)
            comm_s = nl * lc.comm_s
            launch_s = nl * lc.launch_s
            g1 = g0 + gpu_s + comm_s + launch_s
            self.gpu_free[s] = g1
            busy_cpu = self.eager or batch.prefill
            cpu_after = g1 if busy_cpu else prep_end
            if s == 0:
                cpu0 = cpu_after
                batch.stage0_start_s, batch.stage0_end_s = g0, g1
            else:
                after = cpu_after if overlap_processing else g1
                self.cpu_free[s] = after + self.process_s
            col = self.cols[s]
            col[0].append(g0)
            col[1].append(g1)
            col[2].append(gpu_s)
            col[3].append(comm_s)
            col[4].append(launch_s)
            col[5].append(1.0 if batch.prefill else 0.0)
            col[6].append(nl * lc.allreduce_bytes)
            if s < self.n - 1:
                col[7].append(g1)
                col[8].append(g1 + send)
                col[9].append(send_bytes)
                ready = g1 + send
            else:
                batch.done_s = g1 + self.return_s
        return cpu0

    def stage_traces(self) -> tuple[StageTrace, ...]:
        return tuple(_stage_trace(c) for c in self.cols)


def form_prefill(reqs: list[Req], budget: int) -> tuple[list[tuple[Req, int]], int, int]:
    """Prefill items for `reqs` within a token budget: (items, tokens, context tokens)."""
    items: list[tuple[Req, int]] = []
    ctx = 0
    left = budget
    for r in reqs:
        if left <= 0:
            break
        take = min(r.prompt_left, left)
        items.append((r, take))
        ctx += r.ctx + take
        left -= take
    return items, budget - left, ctx


def apply_result(batch: Batch, hist: History, t: float) -> list[Req]:
    """A micro-batch's result processed at `t`: tokens and latencies counted.

    Returns the requests it finished.
    """
    done: list[Req] = []
    for r, take in batch.items:
        if r.prompt_left > 0:
            r.prompt_left -= take
            r.ctx += take
            if r.prompt_left > 0:
                continue
        r.out_left -= 1
        r.ctx += 1
        hist.tokens += 1
        if math.isnan(r.last_token_s):
            hist.ttft.append(t - r.arrived_s)
        else:
            hist.itl.append(t - r.last_token_s)
        r.last_token_s = t
        if r.out_left <= 0:
            hist.e2e.append(t - r.arrived_s)
            done.append(r)
    return done


def finish_trace(pipe: Pipeline, hist: History, *, cap: int, slots: int) -> ReplicaTrace:
    return ReplicaTrace(
        stages=pipe.stage_traces(),
        load_t_s=np.asarray(hist.load_t),
        running=np.asarray(hist.load_run),
        queued=np.asarray(hist.load_q),
        micro_batch=np.asarray(hist.load_mb),
        in_flight_t_s=np.asarray(hist.fl_t),
        in_flight=np.asarray(hist.fl_v),
        tokens=hist.tokens,
        micro_batches=hist.micro_batches,
        decode_tokens_per_micro_batch=(
            hist.decode_tokens / hist.decode_batches if hist.decode_batches else 0.0
        ),
        max_in_flight=hist.max_in_flight,
        micro_batch_cap=cap,
        slots=slots,
        ttft_s=np.asarray(hist.ttft),
        itl_s=np.asarray(hist.itl),
        e2e_s=np.asarray(hist.e2e),
    )


def _clock_fn(faults: list[FaultSpec]) -> list[tuple[float, float, float]]:
    return [(f.start_s, f.end_s, f.clock_ratio) for f in faults]


def _clock_at(faults: list[tuple[float, float, float]], t: float) -> float:
    ratio = 1.0
    for a, b, c in faults:
        if a <= t < b and c < ratio:
            ratio = c
    return ratio


def _stage_trace(c: list[array[float]]) -> StageTrace:
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
