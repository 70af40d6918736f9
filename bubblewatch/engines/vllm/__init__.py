"""vLLM (`vllm serve`): everything bubblewatch knows of it.

`command` (launchers, flags, defaults), `flags.json` (generated: the flags
each release accepts), `batches` (batches in flight per release: its
scheduler policy), and below the metrics, live-state API and fix spellings.
docs/engines.md describes the parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bubblewatch.engines.base import (
    Engine,
    Fixes,
    InFlight,
    LiveApi,
    LoadMetrics,
    NoScheduler,
    RankOrder,
)
from bubblewatch.engines.vllm.batches import batches_in_flight
from bubblewatch.engines.vllm.command import COMMAND

__all__ = ["ENGINE", "VllmScheduler"]


@dataclass(frozen=True)
class VllmScheduler(NoScheduler):
    """vLLM's engine core: a queue of `max_concurrent_batches` batches (`batches`), no slots."""

    def batches_in_flight(
        self, version: str | None, pp_size: int, *, async_flag: bool | None, v2_env: bool | None
    ) -> InFlight | None:
        return batches_in_flight(version, pp_size, async_flag=async_flag, v2_env=v2_env)

    def runner_env(self, env: Mapping[str, str]) -> bool | None:
        """VLLM_USE_V2_MODEL_RUNNER, read as vLLM does (bool(int(value)))."""
        v2 = env.get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower()
        return {"1": True, "0": False}.get(v2)


ENGINE = Engine(
    name="vllm",
    title="vLLM",
    command=COMMAND,
    # One series per engine (DP rank): summed. None with --disable-log-stats or --headless.
    metrics=LoadMetrics(running="vllm:num_requests_running", queued="vllm:num_requests_waiting"),
    # /server_info exists only with VLLM_SERVER_DEV_MODE=1 and holds the start-up
    # configuration: nothing is settable live.
    live=LiveApi(version_paths=("/version",)),
    scheduler=VllmScheduler(),
    fixes=Fixes(
        setting_flags={
            "pp_size": (("--pipeline-parallel-size", "-pp"), "--pipeline-parallel-size"),
            "tp_size": (("--tensor-parallel-size", "-tp"), "--tensor-parallel-size"),
            "dp_size": (("--data-parallel-size", "-dp"), "--data-parallel-size"),
            "max_running_requests": (("--max-num-seqs",), "--max-num-seqs"),
            "cuda_graph": (("--enforce-eager",), "--enforce-eager"),
        },
        async_flags=("--async-scheduling", "--no-async-scheduling"),
    ),
    placement=RankOrder(multi_node=True),  # rank r on CUDA device r, node by node
    flag_data="bubblewatch.engines.vllm",
)
