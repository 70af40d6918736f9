"""SGLang's pipeline-parallel scheduling policy: its slots, per-slot cap and the ceiling.

`scheduler_pp_mixin.py` / `scheduler.py` (0.5.7-0.5.23): rank 0 cycles over
`pp_loop_size = pp_size + pp_async_batch_depth` micro-batch slots, each with
its own running batch; a slot admits waiting requests up to the per-slot cap
`pp_max_micro_batch_size` (default `max(max_running_requests // pp_size, 1)`)
when its turn comes. So at most `(pp_size + depth) x cap` requests run. With
one stage the overlap scheduler prepares the next batch during this one (PP
turns it off). The event loop that plays this policy is bubblewatch.sim's
`sched_sglang`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bubblewatch.engines.base import NoScheduler

__all__ = ["SGLangScheduler", "default_cap", "micro_batch_slots", "requests_ceiling"]


def micro_batch_slots(pp_size: int, depth: int) -> int:
    """`pp_loop_size`: the micro-batch slots rank 0 cycles over (1 without a pipeline)."""
    if pp_size <= 1:
        return 1
    return pp_size + max(depth, 0)


def default_cap(max_running: int, pp_size: int) -> int:
    """The per-slot cap SGLang fills in when `--pp-max-micro-batch-size` is unset."""
    return max(max_running // max(pp_size, 1), 1)


def requests_ceiling(pp_size: int, depth: int, cap: int) -> int:
    """The most requests that can run: every slot at its cap."""
    return micro_batch_slots(pp_size, depth) * cap


@dataclass(frozen=True)
class SGLangScheduler(NoScheduler):
    """The `Scheduler` of bubblewatch.engines.base for SGLang.

    No fixed number of batches in flight: the slots that hold requests decide
    (the simulator plays them).
    """

    async_depth: bool = True

    def micro_batch_slots(self, pp_size: int, depth: int) -> int | None:
        return micro_batch_slots(pp_size, depth) if pp_size > 1 else None

    def default_micro_batch_cap(self, max_running: int, pp_size: int) -> int | None:
        return default_cap(max_running, pp_size)

    def overlaps_cpu(self, pp_size: int) -> bool:
        return pp_size == 1  # the overlap scheduler cannot run with PP
