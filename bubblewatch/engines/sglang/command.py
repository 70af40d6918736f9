"""Reading an SGLang command line: the launchers, defaults, and the fields only SGLang has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bubblewatch.engines.base import CommandLine, FlagReader, Launcher
from bubblewatch.engines.sglang.flags import OPTIONS, RENAMED

__all__ = ["COMMAND", "DEFAULT_HOST", "DEFAULT_PORT", "graphs_off"]

DEFAULT_PORT = 30000
DEFAULT_HOST = "127.0.0.1"


def graphs_off(r: FlagReader) -> tuple[str, ...]:
    """The flags (as given) that turn SGLang's decode CUDA graphs off.

    `--disable-cuda-graph` (every version; deprecated from 0.5.14) or, from
    0.5.14, `--cuda-graph-backend-decode disabled`.
    """
    off: list[str] = []
    if r.values.get("disable_cuda_graph") is True:
        off.append(r.spelled.get("--disable-cuda-graph", "--disable-cuda-graph"))
    backend = r.values.get("cuda_graph_backend_decode")
    if isinstance(backend, str) and backend.strip().lower() == "disabled":
        off.append("--cuda-graph-backend-decode")
    return tuple(off)


def read(r: FlagReader) -> Mapping[str, Any]:
    """The EngineConfig fields of an SGLang launch."""
    off = graphs_off(r)
    return {
        "ep_size": r.size("ep_size"),
        "attn_dp_size": r.size("attn_dp_size"),
        "pp_async_batch_depth": r.int_("pp_async_batch_depth", 0, minimum=0),
        "pp_max_micro_batch_size": r.int_("pp_max_micro_batch_size", None, minimum=1),
        "cuda_graph": not off,
        "graphs_off_by": off,
        "max_running_requests": r.int_("max_running_requests", None, minimum=1),
        "base_gpu_id": r.int_("base_gpu_id", 0, minimum=0),
        "gpu_id_step": r.int_("gpu_id_step", 1, minimum=1),
        "port": r.port(DEFAULT_PORT),
        "host": r.str_("host") or DEFAULT_HOST,
        "metrics_enabled": bool(r.bool_("enable_metrics")),
        "dist_init_addr": r.str_("dist_init_addr"),
    }


COMMAND = CommandLine(
    package="sglang",
    launchers=(
        Launcher("sglang.launch_server", module=True),
        Launcher("sglang_router.launch_server", module=True),
        Launcher("sglang.cli.main", module=True, subcommand="serve"),
        Launcher("sglang", module=True, subcommand="serve"),
        Launcher("sglang", subcommand="serve"),
    ),
    options=OPTIONS,
    renamed=RENAMED,
    default_port=DEFAULT_PORT,
    default_host=DEFAULT_HOST,
    layer_partition_env="SGLANG_PP_LAYER_PARTITION",
    rendezvous_flag="--dist-init-addr",
    process_title="sglang::",
    read=read,
)
