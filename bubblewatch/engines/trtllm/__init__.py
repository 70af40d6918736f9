"""TensorRT-LLM (`trtllm-serve`): everything bubblewatch knows of it.

Its wheels are not on PyPI, so there is no generated flag table yet; its
`/metrics` answers JSON iteration stats (`numActiveRequests`,
`numQueuedRequests`; empty unless `enable_iter_perf_stats` is set in the
`--extra_llm_api_options` file). docs/engines.md describes the parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bubblewatch.engines.base import CommandLine, Engine, FlagReader, Launcher, LiveApi, LoadMetrics
from bubblewatch.engines.trtllm.flags import OPTIONS

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ENGINE"]

DEFAULT_PORT = 8000
DEFAULT_HOST = "localhost"


def read(r: FlagReader) -> Mapping[str, Any]:
    """The EngineConfig fields of a trtllm-serve launch."""
    return {
        "ep_size": r.size("ep_size"),
        "max_running_requests": r.int_("max_running_requests", None, minimum=1),
        "port": r.port(DEFAULT_PORT),
        "host": r.str_("host") or DEFAULT_HOST,
        "metrics_enabled": False,
    }


ENGINE = Engine(
    name="trtllm",
    title="TensorRT-LLM",
    command=CommandLine(
        package="tensorrt_llm",
        launchers=(Launcher("trtllm-serve", subcommand="serve", subcommand_optional=True),),
        options=OPTIONS,
        default_port=DEFAULT_PORT,
        default_host=DEFAULT_HOST,
        wrappers=("trtllm-llmapi-launch",),
        read=read,
    ),
    metrics=LoadMetrics(
        running="numActiveRequests",
        queued="numQueuedRequests",
        format="json",
        served_by_default=True,
    ),
    live=LiveApi(version_paths=("/version",)),
)
