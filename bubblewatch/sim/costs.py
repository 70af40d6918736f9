"""What one micro-batch costs on one stage: GPU work, TP all-reduces, kernel launches, sends.

Pure arithmetic on the scenario; the assumptions are listed in docs/simulator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bubblewatch.sim.spec import Scenario


@dataclass(frozen=True)
class LayerCost:
    """Per-layer seconds at full clock, and all-reduce bytes each GPU sends per layer."""

    gpu_s: float
    comm_s: float
    launch_s: float
    allreduce_bytes: float


def distinct_experts(experts: int, per_token: int, tokens: int) -> float:
    """Expected distinct experts touched by `tokens` tokens under uniform top-k routing."""
    if tokens <= 0:
        return 0.0
    return float(experts * (1.0 - (1.0 - per_token / experts) ** tokens))


def busiest_rank_experts(experts: int, touched: float, ranks: int) -> float:
    """Touched experts held by the busiest of `ranks` expert-parallel ranks (whole experts each).

    Each rank holds experts / ranks experts; the touched ones fall on a rank as a
    hypergeometric draw. The busiest rank's share is taken as mean + sd * sqrt(2 ln ranks)
    (the expected maximum of `ranks` near-normal draws), within [mean, local experts].
    """
    if ranks <= 1:
        return touched
    local = experts / ranks
    mean = touched / ranks
    var = (
        touched * (1 / ranks) * (1 - 1 / ranks) * max(experts - touched, 0.0) / max(experts - 1, 1)
    )
    return float(min(local, touched, mean + math.sqrt(var) * math.sqrt(2 * math.log(ranks))))


class CostModel:
    """Layer and transfer costs for one scenario (constants hoisted for the event loop)."""

    def __init__(self, sc: Scenario) -> None:
        gpu, link, host, model = (
            sc.hardware.gpu,
            sc.hardware.interconnect,
            sc.hardware.host,
            sc.model,
        )
        self.tp = sc.parallel.tp_size
        self.ep = sc.parallel.ep_size
        self.bw_bytes_per_s = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency_ratio
        self.flops_per_s = gpu.tensor_flops_per_s * gpu.compute_efficiency_ratio
        self.dense_bytes = model.dense_weight_bytes_per_layer
        self.moe = model.moe
        self.flops_per_token = model.flops_per_token_per_layer
        self.kv_bytes = model.kv_bytes_per_token_per_layer
        self.token_bytes = float(model.hidden_size * model.activation_bytes)
        self.launch_per_layer_s = model.kernels_per_layer * host.launch_overhead_s
        # A kernel cannot finish faster than its minimum latency: a layer's GPU time
        # has a floor of kernels x min_kernel_s however little it reads.
        self.kernel_floor_s = model.kernels_per_layer * gpu.min_kernel_s
        self.cuda_graph = sc.parallel.cuda_graph
        self.link_bw = link.bandwidth_bytes_per_s
        self.link_latency_s = link.latency_s
        self.ar_latency_s = link.allreduce_latency_s

    def layer(self, *, prefill: bool, tokens: int, context_tokens: int) -> LayerCost:
        """One layer's cost for a micro-batch of `tokens` new tokens over `context_tokens` KV."""
        read_bytes = (self.dense_bytes + context_tokens * self.kv_bytes) / self.tp
        if self.moe is not None:
            touched = distinct_experts(self.moe.experts, self.moe.experts_per_token, tokens)
            if self.ep > 1:
                # Expert parallelism: whole experts per rank; the busiest rank sets the pace.
                busiest = busiest_rank_experts(self.moe.experts, touched, self.ep)
                read_bytes += self.moe.expert_weight_bytes * busiest
            else:
                read_bytes += self.moe.expert_weight_bytes * touched / self.tp
        flops = tokens * self.flops_per_token / self.tp
        gpu_s = max(read_bytes / self.bw_bytes_per_s, flops / self.flops_per_s, self.kernel_floor_s)
        comm_s = 0.0
        ar_bytes = 0.0
        if self.tp > 1:
            msg = tokens * self.token_bytes
            ar_bytes = 2.0 * msg * 2.0 * (self.tp - 1) / self.tp
            comm_s = 2.0 * self.ar_latency_s + ar_bytes / self.link_bw
        # SGLang captures graphs for decode only; prefill always launches eagerly.
        launch_s = self.launch_per_layer_s if (prefill or not self.cuda_graph) else 0.0
        return LayerCost(gpu_s, comm_s, launch_s, ar_bytes)

    def send_s(self, tokens: int) -> float:
        """Activation hand-off to the next stage: latency plus bytes over the link."""
        return self.link_latency_s + tokens * self.token_bytes / self.link_bw

    def send_bytes(self, tokens: int) -> float:
        return tokens * self.token_bytes
