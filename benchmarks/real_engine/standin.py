"""A telemetry stand-in for an engine on CPUs, and the ground truth it is judged against.

Stand-in (what the detector sees): each pipeline rank's worker process plays
one GPU. Its `kernel_busy_ratio` is the process's user + system CPU time per
second of wall time: a waiting CPU worker spins on `sched_yield`, busy-looking
and not working, as an NCCL receive spin reads busy in `utilization.gpu`. Its
`sm_active_ratio` is the **user** CPU time less the spin's share of it: the
spin's user seconds per system second are measured per rank while the worker
only spins (`spin_calibration`), and that much is taken out per system second
(the forward pass itself makes almost no system calls). The engine's load
records are the running/waiting counts read from its `/metrics`. Written as
a bubblewatch trace (docs/trace-format.md) and analysed by `bubblewatch
analyze`, the ordinary path.

Truth (from the hook in the engine's venv, engine_hook.py): each rank's work
is the thread CPU time inside `execute_model` and `sample_tokens` per second
of the window; the bubble is `1 - (sum of the ranks' work) / pp_size`, the
quantity the detector's `bubble_ratio` estimates (docs/detection.md). Batches
in flight are read from the `execute_model` calls that scheduled tokens, each
taken as its last `cpu_s` seconds (a later rank's call opens with the wait for
its input): the share of time both ranks compute at once; the step rate is the
last rank's forward passes per second.
"""

from __future__ import annotations

import bisect
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from client import LoadResult
    from engine_proc import Engine

# |detector's bubble - truth| at each load, in bubble-ratio units: the stated error of the
# CPU stand-in (BENCHMARKS.md, "Real engine": -0.03 to -0.07 measured with the spin's user
# time taken out, -0.15 to -0.26 without).
BUBBLE_TOLERANCE = 0.15
SPIN_WINDOW_S = 0.6  # within the second a worker spins after its last message


@dataclass(frozen=True)
class Call:
    kind: str
    rank: int
    t0: float
    t1: float
    cpu_s: float
    tokens: int
    reqs: int


def read_calls(exec_dir: Path) -> list[Call]:
    out = []
    for f in sorted(exec_dir.glob("exec-*.tsv")):
        for line in f.read_text().splitlines():
            p = line.split("\t")
            if len(p) != 7:
                continue  # a line cut by a killed worker
            out.append(
                Call(p[0], int(p[1]), float(p[2]), float(p[3]), float(p[4]), int(p[5]), int(p[6]))
            )
    return out


def read_counts(exec_dir: Path, name: str) -> list[tuple[float, int, int]]:
    """The hook's `sched-*.tsv` or `gauge-*.tsv`: (t_monotonic, running, waiting), in order."""
    out = []
    for f in sorted(exec_dir.glob(f"{name}-*.tsv")):
        for line in f.read_text().splitlines():
            p = line.split("\t")
            if len(p) == 3:  # else a line cut by a killed process
                out.append((float(p[0]), int(p[1]), int(p[2])))
    out.sort()
    return out


def served_between(gauges: list[tuple[float, int, int]], t0: float, t1: float) -> set[int]:
    """Every running + waiting total the gauges held at some instant in [t0, t1]."""
    times = [t for t, _, _ in gauges]
    i = bisect.bisect_right(times, t0) - 1
    held = {gauges[i][1] + gauges[i][2]} if i >= 0 else {0}
    j = bisect.bisect_right(times, t1)
    held.update(r + w for _, r, w in gauges[max(i + 1, 0) : j])
    return held


@dataclass(frozen=True)
class Truth:
    work: dict[int, float]  # rank -> thread CPU seconds in the engine's calls per second
    bubble_ratio: float
    both_busy_ratio: float  # share of wall time both ranks are inside a forward pass
    steps_per_s: float  # the last rank's forward passes per second
    mean_batch_reqs: float  # requests per forward pass on the last rank
    # Time-weighted batches in flight: batch i from rank 0's i-th forward pass to the last
    # rank's i-th (each rank runs them in order); None when the counts do not pair up.
    mean_in_flight: float | None = None


def _clip_sum(calls: Sequence[Call], a: float, b: float, attr: str) -> float:
    total = 0.0
    for c in calls:
        lo, hi = max(c.t0, a), min(c.t1, b)
        if hi > lo:
            share = (hi - lo) / (c.t1 - c.t0) if c.t1 > c.t0 else 1.0
            total += share * (getattr(c, attr) if attr else (c.t1 - c.t0))
    return total


def truth(calls: Sequence[Call], a: float, b: float, pp: int = 2) -> Truth:
    span = b - a
    work = {
        r: _clip_sum([c for c in calls if c.rank == r], a, b, "cpu_s") / span for r in range(pp)
    }
    fwd = [c for c in calls if c.kind == "exec" and c.tokens > 0 and c.t1 > a and c.t0 < b]
    grid = np.linspace(a, b, 20001)
    inside = np.zeros((pp, grid.size), dtype=bool)
    for c in fwd:
        # The call's work as its last `cpu_s` seconds: a later rank's call opens with the
        # wait for its input (no CPU), which is no work in flight.
        inside[c.rank] |= (grid >= c.t1 - c.cpu_s) & (grid < c.t1)
    last = [c for c in fwd if c.rank == pp - 1 and a <= c.t0 < b]
    firsts = [c for c in calls if c.kind == "exec" and c.tokens > 0 and c.rank == 0]
    lasts = [c for c in calls if c.kind == "exec" and c.tokens > 0 and c.rank == pp - 1]
    in_flight = None
    if firsts and len(firsts) == len(lasts):
        flying = np.zeros(grid.size)
        for f, g in zip(firsts, lasts, strict=True):
            if g.t1 > a and f.t0 < b:
                flying += (grid >= f.t0) & (grid < g.t1)
        in_flight = float(flying.mean())
    return Truth(
        work=work,
        bubble_ratio=1.0 - sum(work.values()) / pp,
        both_busy_ratio=float(inside.all(axis=0).mean()),
        steps_per_s=len(last) / span,
        mean_batch_reqs=float(np.mean([c.reqs for c in last])) if last else 0.0,
        mean_in_flight=in_flight,
    )


# Below this much system time in the calibration window the spin's split is not measured.
MIN_SPIN_SYS_S = 0.02


def spin_calibration(
    before: Mapping[int, tuple[float, float]], after: Mapping[int, tuple[float, float]]
) -> dict[int, float]:
    """Per rank, user / system seconds of a window in which the worker only spins.

    Taken just after a lone request ends: the worker polls its message queue with
    `sched_yield` for a second after each message and has nothing else to do. A rank with
    too little system time in the window gets 0 (nothing taken out).
    """
    out = {}
    for rank, (u0, s0) in before.items():
        u1, s1 = after[rank]
        out[rank] = (u1 - u0) / (s1 - s0) if s1 - s0 >= MIN_SPIN_SYS_S else 0.0
    return out


def ratios(
    user_s: float, sys_s: float, dt_s: float, spin_user_per_sys: float
) -> tuple[float, float]:
    """One rank's (`sm_active_ratio`, `kernel_busy_ratio`) stand-in over `dt_s` of wall time.

    `user_s`/`sys_s`: the worker's CPU seconds in that time; the spin's user seconds per
    system second (`spin_calibration`) are taken out of the user time as spin, not work.
    """
    user = min(1.0, max(0.0, user_s - spin_user_per_sys * sys_s) / dt_s)
    busy = min(1.0, (user_s + sys_s) / dt_s)
    return user, busy


def write_trace(
    path: Path,
    res: LoadResult,
    *,
    argv: Sequence[str],
    version: str,
    pids: Mapping[int, int],
    skip_s: float,
    spin_user_per_sys: Mapping[int, float] | None = None,
) -> tuple[float, float]:
    """The stand-in trace of one load window; returns the window (monotonic) it covers.

    `spin_user_per_sys`: per rank, the user seconds the `sched_yield` spin costs per system
    second (`spin_calibration`); that much user time per system second is taken out of
    `sm_active_ratio`, as spin rather than work.
    """
    k = spin_user_per_sys or {}
    offset = time.time() - time.monotonic()
    a = res.t0 + skip_s
    b = min(res.t1, max(t for t, *_ in res.cpu[0]))
    header = {
        "bubblewatch_trace": 1,
        "gpus": [{"index": r, "name": f"CPU worker, pipeline rank {r} (stand-in)"} for r in pids],
        "topology": {
            "stages": [[r] for r in sorted(pids)],
            "engine": "vllm",
            "source": "real-engine",
            "argv": list(argv),
        },
        "meta": {
            "engine_version": version,
            "standin": "CPU times of vLLM's CPU workers",
            "spin_user_per_sys": {str(r): v for r, v in k.items()},
            "pids": {str(r): p for r, p in pids.items()},
        },
    }
    lines = [json.dumps(header)]
    for rank, rows in res.cpu.items():
        for (t_a, u_a, s_a), (t_b, u_b, s_b) in itertools.pairwise(rows):
            if t_b <= a or t_a >= b or t_b - t_a <= 0:
                continue
            user, busy = ratios(u_b - u_a, s_b - s_a, t_b - t_a, k.get(rank, 0.0))
            lines.append(
                json.dumps(
                    {
                        "type": "sample",
                        "t": round(t_b + offset, 6),
                        "gpu": rank,
                        "sm_active_ratio": round(user, 6),
                        "kernel_busy_ratio": round(busy, 6),
                    }
                )
            )
    for t, _end, _lo, _hi, running, waiting in res.counts:
        if a <= t <= b:
            lines.append(
                json.dumps(
                    {
                        "type": "load",
                        "t": round(t + offset, 6),
                        "running": running,
                        "queued": waiting,
                    }
                )
            )
    path.write_text("\n".join(lines) + "\n")
    return a, b


def raw_bubble(path: Path) -> float:
    """1 - the mean `sm_active_ratio` over a stand-in trace's samples (all ranks)."""
    rows = [json.loads(ln) for ln in path.read_text().splitlines()[1:]]
    active = [r["sm_active_ratio"] for r in rows if r.get("type") == "sample"]
    return 1.0 - float(np.mean(active)) if active else float("nan")


def calibrate_spin(engine: Engine, model: Path, ranks: dict[int, int]) -> dict[int, float]:
    """The workers' spin, user seconds per system second, just after a lone request."""
    from client import complete, proc_cpu_s  # the live engine's side; the rest is arithmetic

    complete(engine.url, str(model))
    time.sleep(0.05)
    before = {r: proc_cpu_s(p) for r, p in ranks.items()}
    time.sleep(SPIN_WINDOW_S)
    after = {r: proc_cpu_s(p) for r, p in ranks.items()}
    return spin_calibration(before, after)
