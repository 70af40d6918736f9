"""Which pipeline a multi-node engine's stages on this host belong to, and where they sit in it.

An engine launched on several nodes (SGLang `--nnodes N --node-rank R`, vLLM's
multiprocessing backend with the same flags) runs part of its pipeline on each
node. Every node's daemon must give its stages the same `pipeline` label and
their index in the whole pipeline (docs/fleet.md). Both follow from the flags
every node is launched with:

- the id from the rendezvous address all nodes dial (SGLang `--dist-init-addr`,
  vLLM `--master-addr`/`--master-port`) and the model's name: alike on every
  node of one engine; two engines alive at once cannot share the address;
- the first stage from `--node-rank`, `--nnodes` and the pipeline size, as the
  engine places its ranks (SGLang's `_launch_scheduler_processes`: node R holds
  pp ranks `R // max(N // P, 1) * max(P // N, 1)` onwards; vLLM numbers ranks
  node by node, `tp_size` to a stage). `gpumap.rank_device_ordinals` places
  the same ranks on this host's GPUs.

A single-node engine has no node identity: its stages are the whole pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bubblewatch import engines
from bubblewatch.topology.engine_config import EngineConfig

__all__ = ["NodeIdentity", "node_identity"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._:@/\[\]-]+")


@dataclass(frozen=True)
class NodeIdentity:
    """This node's part of a multi-node engine."""

    node_rank: int
    nnodes: int
    first_stage: int  # global pp rank of this node's first stage
    pipeline_id: str | None  # None: the flags name no rendezvous address

    def describe(self) -> str:
        pid = self.pipeline_id or "no pipeline id (no rendezvous address in the flags)"
        return f"node {self.node_rank} of {self.nnodes}, first stage {self.first_stage}, {pid}"


def node_identity(config: EngineConfig) -> NodeIdentity | None:
    """The node's identity from its engine flags; None for an engine on one node."""
    engine = engines.get(config.name)
    if config.nnodes <= 1 or engine is None or not engine.placement.multi_node:
        return None
    return NodeIdentity(
        node_rank=config.node_rank,
        nnodes=config.nnodes,
        first_stage=first_stage(config),
        pipeline_id=_pipeline_id(config),
    )


def first_stage(config: EngineConfig) -> int:
    """Global pipeline stage of the first stage this node runs."""
    placement = engines.placement_of(config.name)
    return placement.first_stage(config.pp_size, config.tp_size, config.nnodes, config.node_rank)


def _pipeline_id(config: EngineConfig) -> str | None:
    if not config.dist_init_addr:
        return None
    text = f"{config.name}@{config.dist_init_addr.strip()}"
    model = _model_name(config.model)
    if model:
        text += f"/{model}"
    return _UNSAFE.sub("_", text)


def _model_name(model: str | None) -> str:
    """A model's name alike on every node: a hub id as given, a path or URL's last part."""
    if not model:
        return ""
    text = model.strip().rstrip("/")
    if "://" in text or text.startswith(("/", ".", "~")):
        text = text.rsplit("/", 1)[-1]
    return text
