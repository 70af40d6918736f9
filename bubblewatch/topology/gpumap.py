"""Map an engine's ranks to host GPUs: rank -> CUDA device ordinal -> NVML index.

Global rank r = pp_rank * tp_size + tp_rank in all three engines; where each
engine puts rank r is its package's `placement` (bubblewatch.engines):

- SGLang launches rank (pp, tp) on CUDA device
  `base_gpu_id + (pp % pp_per_node) * tp_per_node + (tp % tp_per_node) * gpu_id_step`
  (its `_launch_scheduler_processes`; note the step multiplies the TP rank only),
  and data-parallel replica d `d * tp_size * pp_size * gpu_id_step` devices further
  on (`DataParallelController.launch_dp_schedulers`, 0.4-0.5.23).
- vLLM and TensorRT-LLM put rank r on CUDA device r (local rank) in order;
  vLLM's `--device-ids 2,3,5,7` (0.28+) lists the physical GPUs instead of
  CUDA_VISIBLE_DEVICES. With `--distributed-executor-backend ray`, Ray assigns
  the GPUs: rank order is assumed when the whole world fits on this host, and a
  world larger than the host cannot be placed from the flags (GpuMapError).

CUDA device ordinal i is the i-th entry of CUDA_VISIBLE_DEVICES (indices or
`GPU-<uuid>` prefixes), or host GPU i when the variable is unset. NVML indexes
GPUs in PCI bus order; CUDA does too only with `CUDA_DEVICE_ORDER=PCI_BUS_ID`
or identical GPUs, which `visible_devices` checks and warns about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bubblewatch import engines
from bubblewatch.errors import BubblewatchError
from bubblewatch.limits import MAX_GPU_INDEX, decimal
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.topology.engine_config import EngineConfig


class GpuMapError(BubblewatchError, ValueError):
    """The engine's flags cannot be placed on this host's GPUs."""


@dataclass(frozen=True)
class VisibleDevices:
    """Host NVML indices in CUDA ordinal order, and what was assumed to get them."""

    indices: tuple[int, ...]
    warnings: tuple[str, ...] = ()


def visible_devices(
    cuda_visible_devices: Sequence[str] | None,
    gpus: Sequence[GpuInfo],
    *,
    device_order: str | None = None,
) -> VisibleDevices:
    """Resolve CUDA_VISIBLE_DEVICES entries against the host's GPUs (index, uuid).

    As CUDA does, the list stops at the first entry that names no GPU. With no
    host inventory (no NVML), indices are taken as they are and UUIDs cannot be
    resolved.
    """
    warnings: list[str] = []
    host = sorted(gpus, key=lambda g: g.index)
    if cuda_visible_devices is None:
        if not host:
            return VisibleDevices((), ())
        indices = tuple(g.index for g in host)
    else:
        resolved: list[int] = []
        for pos, entry in enumerate(cuda_visible_devices):
            idx = _resolve_entry(entry, host)
            if idx is None:
                warnings.append(
                    f"CUDA_VISIBLE_DEVICES entry {pos} ({entry!r}) names no GPU on this host; "
                    "CUDA ignores it and every entry after it"
                )
                break
            if idx in resolved:
                warnings.append(f"CUDA_VISIBLE_DEVICES lists GPU {idx} twice; CUDA stops there")
                break
            resolved.append(idx)
        indices = tuple(resolved)
    names = {g.name for g in host if g.index in indices and g.name}
    if len(names) > 1 and device_order != "PCI_BUS_ID":
        warnings.append(
            "GPUs of different models without CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA orders them "
            "fastest first, so the stage-to-GPU mapping may be wrong"
        )
    return VisibleDevices(indices, tuple(warnings))


def _resolve_entry(entry: str, host: Sequence[GpuInfo]) -> int | None:
    text = entry.strip()
    if text.lstrip("-").isdigit():
        n = decimal(text, MAX_GPU_INDEX)  # None: negative (CUDA hides the rest), or too large
        if n is None:
            return None
        if not host:
            return n
        return n if any(g.index == n for g in host) else None
    if text.upper().startswith(("GPU-", "MIG-")):
        # CUDA accepts any unique prefix of the UUID.
        matches = [g.index for g in host if g.uuid and g.uuid.lower().startswith(text.lower())]
        return matches[0] if len(matches) == 1 else None
    return None


def rank_device_ordinals(config: EngineConfig, *, dp_rank: int = 0) -> list[list[int]]:
    """CUDA device ordinal of each local (pp, tp) rank: result[stage][tp_rank].

    Only the ranks that run on this node (`--nnodes`/`--node-rank`) are listed.
    """
    placement = engines.placement_of(config.name)
    return placement.device_ordinals(
        config.pp_size,
        config.tp_size,
        config.nnodes,
        config.node_rank,
        config.base_gpu_id,
        config.gpu_id_step,
        dp_rank,
    )


def map_gpus(
    config: EngineConfig,
    visible: Sequence[int | str] | None = None,
    gpus: Sequence[GpuInfo] = (),
    *,
    dp_rank: int = 0,
    source: str = "cmdline",
    pipeline_id: str = "",
) -> Topology:
    """Place the engine's (pp, tp) ranks on host GPU indices.

    `visible` lists the devices the engine sees, in CUDA ordinal order, as host
    indices or GPU UUIDs (default: the engine's CUDA_VISIBLE_DEVICES, else all
    of `gpus`, else ordinals as host indices). UUIDs need `gpus` to resolve.
    """
    if visible is None:
        listed = device_list(config)
        vis = visible_devices(listed, gpus, device_order=config.env.get("CUDA_DEVICE_ORDER"))
        host_of = list(vis.indices)
        if listed is None and not gpus:
            host_of = []  # unknown: ordinals are host indices
    else:
        vis = visible_devices([str(v) for v in visible], gpus)
        host_of = list(vis.indices)
        if len(host_of) != len(visible):
            raise GpuMapError("; ".join(vis.warnings) or f"cannot resolve devices {visible!r}")
    ordinals = rank_device_ordinals(config, dp_rank=dp_rank)
    if config.executor_backend == "ray" and config.nnodes <= 1:
        n_host = len(host_of) if host_of else len(gpus)
        if n_host and config.world_size * max(config.dp_size, 1) > n_host:
            raise GpuMapError(
                f"{config.name} runs {config.world_size} ranks (tp {config.tp_size} x pp "
                f"{config.pp_size}) with --distributed-executor-backend ray on more GPUs than "
                f"this host's {n_host}: Ray places them on the cluster's nodes, so which GPU "
                "here is which stage cannot be read from the flags; give a topology file "
                "(--topology, docs/topology.md) or --pp-size/--tp-size for this host's part"
            )
    if device_list(config) is not None and visible is None and not host_of:
        raise GpuMapError("CUDA_VISIBLE_DEVICES exposes no GPU this host has")
    stages: list[tuple[int, ...]] = []
    for s, row in enumerate(ordinals):
        mapped: list[int] = []
        for t, ordinal in enumerate(row):
            if not host_of:
                mapped.append(ordinal)
            elif ordinal < len(host_of):
                mapped.append(host_of[ordinal])
            else:
                raise GpuMapError(
                    f"{config.name} stage {s} TP rank {t} needs CUDA device {ordinal} but only "
                    f"{len(host_of)} are visible ({_describe(config)})"
                )
        stages.append(tuple(mapped))
    try:
        return Topology(
            stages=tuple(stages),
            engine=config.name,
            source=source,
            pipeline_id=pipeline_id,
            argv=config.argv,
            env=dict(config.env),
        )
    except TopologyError as e:
        raise GpuMapError(f"{_describe(config)} places two ranks on one GPU: {e}") from e


def device_list(config: EngineConfig) -> tuple[str, ...] | None:
    """The GPUs the engine's CUDA ordinals name: vLLM --device-ids, else CUDA_VISIBLE_DEVICES."""
    if config.device_ids is not None:
        return config.device_ids
    return config.cuda_visible_devices


def _describe(config: EngineConfig) -> str:
    parts = [f"pp={config.pp_size}", f"tp={config.tp_size}"]
    if config.base_gpu_id:
        parts.append(f"base_gpu_id={config.base_gpu_id}")
    if config.gpu_id_step != 1:
        parts.append(f"gpu_id_step={config.gpu_id_step}")
    if config.device_ids is not None:
        parts.append("--device-ids " + ",".join(config.device_ids))
    elif config.cuda_visible_devices is not None:
        parts.append("CUDA_VISIBLE_DEVICES=" + ",".join(config.cuda_visible_devices))
    return " ".join(parts)
