"""Reading a vLLM command line: the launchers, defaults, and the fields only vLLM has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bubblewatch.engines.base import CommandLine, FlagReader, Launcher
from bubblewatch.engines.vllm.flags import COMPILATION_FLAGS, OPTIONS, SHORT_OPTIONS

__all__ = ["COMMAND", "CUDAGRAPH_MODES", "DEFAULT_MASTER_PORT", "DEFAULT_PORT"]

DEFAULT_PORT = 8000
DEFAULT_MASTER_PORT = 29501  # ParallelConfig.master_port
CUDAGRAPH_MODES = frozenset({"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})


def cudagraph_mode(r: FlagReader) -> str | None:
    """The compilation config's cudagraph_mode, as the command line sets it."""
    raw = r.compilation.get("cudagraph_mode")
    if raw is None:
        # -O0 / --optimization-level 0 (0.12+) and compilation level 0 (before) run
        # without CUDA graphs unless cudagraph_mode is set explicitly.
        return "NONE" if r.opt_level == 0 else None
    mode = str(raw).strip().upper()
    if mode not in CUDAGRAPH_MODES:
        r.fail(
            f"cudagraph_mode must be one of {', '.join(sorted(CUDAGRAPH_MODES))}, got {raw!r}",
            "--compilation-config",
        )
    return mode


def graphs_off(r: FlagReader, eager: bool, mode: str | None) -> tuple[str, ...]:
    """The flags (canonical spellings) that turn vLLM's CUDA graphs off."""
    off: list[str] = []
    if eager:
        off.append("--enforce-eager")
    if mode == "NONE":
        if "cudagraph_mode" in r.compilation:
            dotted = [k for k in r.flags if k.endswith(".cudagraph_mode")]
            off.extend(dotted or ["--compilation-config"])
        elif r.opt_level == 0:
            off.extend(
                k for k in ("-O", "--optimization-level", "--compilation-config") if k in r.flags
            )
    return tuple(off)


def _device_ids(text: str | None) -> tuple[str, ...] | None:
    """--device-ids "2,3,5,7": physical GPU indices or UUIDs, in rank order."""
    if text is None:
        return None
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _master(r: FlagReader) -> str | None:
    """The multi-node rendezvous (multiprocessing backend): --master-addr:--master-port."""
    addr = r.str_("master_addr")
    if not addr:
        return None
    port = r.int_("master_port", DEFAULT_MASTER_PORT, minimum=1)
    return f"{addr}:{port}"


def read(r: FlagReader) -> Mapping[str, Any]:
    """The EngineConfig fields of a vLLM launch."""
    mode = cudagraph_mode(r)
    eager = bool(r.bool_("enforce_eager"))
    tp, dp = r.size("tp_size"), r.size("dp_size")
    headless = bool(r.bool_("headless"))
    stats = not r.bool_("disable_log_stats")
    return {
        "ep_size": tp * dp if r.bool_("enable_expert_parallel") else 1,
        "cuda_graph": not eager and mode != "NONE",
        "cudagraph_mode": "NONE" if eager else mode,
        "graphs_off_by": graphs_off(r, eager, mode),
        "async_scheduling": r.bool_("async_scheduling"),
        "max_running_requests": r.int_("max_running_requests", None, minimum=1),
        "port": r.port(DEFAULT_PORT),
        "host": r.str_("host"),
        # The OpenAI server serves request gauges on /metrics unless stats are off
        # (--disable-log-stats: no stat loggers) or no API server runs (--headless).
        "metrics_enabled": not headless and stats,
        "headless": headless,
        "executor_backend": r.str_("executor_backend"),
        "device_ids": _device_ids(r.str_("device_ids")),
        "dist_init_addr": _master(r),
    }


COMMAND = CommandLine(
    package="vllm",
    launchers=(
        Launcher("vllm.entrypoints.openai.api_server", module=True),
        Launcher("vllm.entrypoints.api_server", module=True),
        Launcher("vllm.entrypoints.cli.main", module=True, subcommand="serve"),
        Launcher("vllm", module=True, subcommand="serve"),
        Launcher("vllm", subcommand="serve"),
    ),
    options=OPTIONS,
    short_options=SHORT_OPTIONS,
    underscores_as_dashes=True,
    compilation_flags=COMPILATION_FLAGS,
    default_port=DEFAULT_PORT,
    layer_partition_env="VLLM_PP_LAYER_PARTITION",
    rendezvous_flag="--master-addr",
    process_title="VLLM::",
    read=read,
)
