"""SGLang (`python -m sglang.launch_server`, `sglang serve`): everything bubblewatch knows of it.

`command` (launchers, flags, defaults), `flags.json` (generated: the flags
each release accepts), `scheduler` (slots, per-slot cap, the ceiling),
`placement` (ranks on devices), and below the metrics, live-state API and
fix spellings. docs/engines.md describes the parts.
"""

from __future__ import annotations

from bubblewatch.engines.base import Engine, Fixes, LiveApi, LoadMetrics
from bubblewatch.engines.sglang.command import COMMAND
from bubblewatch.engines.sglang.placement import SGLangPlacement
from bubblewatch.engines.sglang.scheduler import SGLangScheduler

__all__ = ["ENGINE", "RANK_LABELS"]

# The ranks of one replica: they schedule the same requests, so their gauges agree.
RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"})

ENGINE = Engine(
    name="sglang",
    title="SGLang",
    command=COMMAND,
    # --enable-metrics, on the server port. With PP the running gauge is the size of
    # the micro-batch the scheduler last logged (metrics_reporter.py, 0.5.7-0.5.23).
    metrics=LoadMetrics(
        running="sglang:num_running_reqs",
        queued="sglang:num_queue_reqs",
        rank_labels=RANK_LABELS,
        micro_batch_label="pp_rank",
    ),
    live=LiveApi(
        # /server_info from 0.5.6; /get_server_info from 0.4 (deprecated, still served).
        version_paths=("/server_info", "/get_server_info"),
        state_paths=(("/server_info", "0.5.6"), ("/get_server_info", None)),
        set_path="/set_internal_state",
        # Up to 0.5.14 /set_internal_state answers true even when it refused.
        reply_trusted_from="0.5.15",
        cap_keys=("pp_max_micro_batch_size", "max_micro_batch_size"),
        api_key_env="SGLANG_API_KEY",
        admin_key_flag="--admin-api-key",
        admin_key_env="SGLANG_ADMIN_API_KEY",
    ),
    scheduler=SGLangScheduler(),
    fixes=Fixes(
        cap_flag="--pp-max-micro-batch-size",
        graph_bs_flags=("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
        graph_bs_unknown="--cuda-graph-max-bs (--cuda-graph-max-bs-decode from 0.5.14)",
        setting_flags={
            "pp_size": (("--pp-size", "--pipeline-parallel-size"), "--pp-size"),
            "tp_size": (("--tp-size", "--tensor-parallel-size", "--tp"), "--tp-size"),
            "dp_size": (("--dp-size", "--data-parallel-size", "--dp"), "--dp-size"),
            "pp_async_batch_depth": (("--pp-async-batch-depth",), "--pp-async-batch-depth"),
            "pp_max_micro_batch_size": (
                ("--pp-max-micro-batch-size",),
                "--pp-max-micro-batch-size",
            ),
            "max_running_requests": (("--max-running-requests",), "--max-running-requests"),
            "prefill_max_requests": (("--prefill-max-requests",), "--prefill-max-requests"),
            "cuda_graph": (("--disable-cuda-graph",), "--disable-cuda-graph"),
            "ep_size": (("--ep-size", "--expert-parallel-size", "--ep"), "--ep-size"),
        },
    ),
    placement=SGLangPlacement(),
    flag_data="bubblewatch.engines.sglang",
)
