"""Where SGLang puts its ranks: devices per node, replicas, a node's first stage.

`_launch_scheduler_processes` (0.4-0.5.23) launches rank (pp, tp) on CUDA device
`base_gpu_id + (pp % pp_per_node) * tp_per_node + (tp % tp_per_node) * gpu_id_step`
(the step multiplies the TP rank only), and `DataParallelController.launch_dp_schedulers`
puts data-parallel replica d `d * tp_size * pp_size * gpu_id_step` devices further on.
Node R of N holds pp ranks `R // max(N // P, 1) * max(P // N, 1)` onwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bubblewatch.engines.base import RankOrder

__all__ = ["SGLangPlacement"]


@dataclass(frozen=True)
class SGLangPlacement(RankOrder):
    """SGLang's rank placement (see the module docstring)."""

    multi_node: bool = True

    def dp_inside_tp(self, flags: Mapping[str, str | bool], attn_dp_size: int) -> bool:
        """DP attention (`--enable-dp-attention`, `--attn-dp-size` 0.5.22+) in the TP group."""
        return flags.get("--enable-dp-attention") is True or attn_dp_size > 1

    def first_stage(self, pp: int, tp: int, nnodes: int, node_rank: int) -> int:
        nnodes = max(nnodes, 1)
        pp_per_node = max(pp // nnodes, 1)
        nodes_per_pp_rank = max(nnodes // pp, 1)
        return pp_per_node * (node_rank // nodes_per_pp_rank)

    def device_ordinals(
        self,
        pp: int,
        tp: int,
        nnodes: int,
        node_rank: int,
        base_gpu_id: int,
        gpu_id_step: int,
        dp_rank: int,
    ) -> list[list[int]]:
        nnodes = max(nnodes, 1)
        nnodes_per_tp_group = max(nnodes // pp, 1)
        tp_per_node = max(tp // nnodes_per_tp_group, 1)
        pp_per_node = max(pp // nnodes, 1)
        group = node_rank % nnodes_per_tp_group
        pp_group = node_rank // nnodes_per_tp_group
        pp_ranks = range(pp_per_node * pp_group, pp_per_node * (pp_group + 1))
        tp_ranks = range(tp_per_node * group, tp_per_node * (group + 1))
        base = base_gpu_id + dp_rank * tp * pp * gpu_id_step
        return [
            [
                base + (p % pp_per_node) * tp_per_node + (t % tp_per_node) * gpu_id_step
                for t in tp_ranks
            ]
            for p in pp_ranks
        ]
