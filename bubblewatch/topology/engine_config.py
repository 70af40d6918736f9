"""A serving engine's configuration as bubblewatch understands it.

Built from a (redacted) command line and environment by the parsers in this
package; the rules engine reads it as facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bubblewatch.topology.training.layout import ParallelLayout


@dataclass(frozen=True)
class EngineConfig:
    """Parsed engine flags, with the engine's own defaults filled in.

    `argv` and `env` are already redacted: no secret ever lands here.
    """

    name: str  # "sglang", "vllm", "trtllm"
    pp_size: int = 1
    tp_size: int = 1
    ep_size: int = 1
    pp_async_batch_depth: int | None = None  # SGLang only; None for other engines
    pp_max_micro_batch_size: int | None = None
    cuda_graph: bool = True
    max_running_requests: int | None = None
    layer_partition: tuple[int, ...] | None = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    port: int | None = None
    metrics_enabled: bool = False
    version: str | None = None
    flags: Mapping[str, str | bool] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # Added by the discovery parsers (all optional, engine defaults filled in).
    model: str | None = None
    host: str | None = None
    dp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    # Rendezvous address every node of a multi-node engine dials ("host:port"):
    # SGLang --dist-init-addr, vLLM --master-addr/--master-port. None when not given.
    dist_init_addr: str | None = None
    cudagraph_mode: str | None = None  # vLLM compilation cudagraph_mode, when known
    async_scheduling: bool | None = None  # vLLM only
    cuda_visible_devices: tuple[str, ...] | None = None  # None: variable not set
    # A training job's parallel layout (bubblewatch.topology.training); None for serving.
    training: ParallelLayout | None = None
    # The flags, as given, that turn CUDA graphs off (e.g. ("--disable-cuda-graph",)).
    graphs_off_by: tuple[str, ...] = ()
    attn_dp_size: int = 1  # SGLang --attn-dp-size (0.5.22+): DP attention inside the TP group
    headless: bool = False  # vLLM --headless: no API server, no /metrics
    executor_backend: str | None = None  # vLLM --distributed-executor-backend
    device_ids: tuple[str, ...] | None = None  # vLLM --device-ids: GPUs in rank order
    # What the engine's own parser would refuse in this command line (ambiguous prefixes).
    problems: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        """GPUs one replica of the engine uses: pp_size * tp_size."""
        return self.pp_size * self.tp_size

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "model": self.model,
            "pp_size": self.pp_size,
            "tp_size": self.tp_size,
            "ep_size": self.ep_size,
            "dp_size": self.dp_size,
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "dist_init_addr": self.dist_init_addr,
            "pp_async_batch_depth": self.pp_async_batch_depth,
            "pp_max_micro_batch_size": self.pp_max_micro_batch_size,
            "cuda_graph": self.cuda_graph,
            "cudagraph_mode": self.cudagraph_mode,
            "async_scheduling": self.async_scheduling,
            "max_running_requests": self.max_running_requests,
            "layer_partition": None if self.layer_partition is None else list(self.layer_partition),
            "base_gpu_id": self.base_gpu_id,
            "gpu_id_step": self.gpu_id_step,
            "host": self.host,
            "port": self.port,
            "metrics_enabled": self.metrics_enabled,
            "cuda_visible_devices": None
            if self.cuda_visible_devices is None
            else list(self.cuda_visible_devices),
            "graphs_off_by": list(self.graphs_off_by),
            "attn_dp_size": self.attn_dp_size,
            "headless": self.headless,
            "executor_backend": self.executor_backend,
            "device_ids": None if self.device_ids is None else list(self.device_ids),
            "problems": list(self.problems),
            "flags": dict(self.flags),
            "argv": list(self.argv),
            "env": dict(self.env),
            "training": None if self.training is None else self.training.to_dict(),
        }
