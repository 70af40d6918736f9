"""The flags bubblewatch reads from each engine, with their aliases and value kinds.

One table per engine maps every spelling of a flag (`--tp-size`, `--tp`, ...)
to one `Opt`: where the value goes, its kind, and its canonical spelling
(the key in `EngineConfig.flags`). Flags not in a table are still kept, as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["int", "str", "bool"]


@dataclass(frozen=True)
class Opt:
    dest: str
    kind: Kind
    flag: str  # canonical spelling, used as the key in EngineConfig.flags
    negatable: bool = False  # accepts --no-<name> (argparse BooleanOptionalAction)


def _table(*specs: tuple[str, Kind, tuple[str, ...], bool]) -> dict[str, Opt]:
    out: dict[str, Opt] = {}
    for dest, kind, aliases, negatable in specs:
        opt = Opt(dest, kind, aliases[0], negatable)
        for alias in aliases:
            out[alias] = opt
    return out


_SGLANG = _table(
    ("model", "str", ("--model-path", "--model"), False),
    ("tp_size", "int", ("--tp-size", "--tensor-parallel-size", "--tp"), False),
    ("pp_size", "int", ("--pp-size", "--pipeline-parallel-size"), False),
    ("ep_size", "int", ("--ep-size", "--expert-parallel-size", "--ep"), False),
    ("dp_size", "int", ("--dp-size", "--data-parallel-size", "--dp"), False),
    ("pp_async_batch_depth", "int", ("--pp-async-batch-depth",), False),
    # 0.4.6.post2-0.5.3 spell the per-slot cap --max-micro-batch-size (RENAMED).
    (
        "pp_max_micro_batch_size",
        "int",
        ("--pp-max-micro-batch-size", "--max-micro-batch-size"),
        False,
    ),
    ("disable_cuda_graph", "bool", ("--disable-cuda-graph",), False),
    ("cuda_graph_max_bs", "int", ("--cuda-graph-max-bs",), False),
    ("max_running_requests", "int", ("--max-running-requests",), False),
    ("base_gpu_id", "int", ("--base-gpu-id",), False),
    ("gpu_id_step", "int", ("--gpu-id-step",), False),
    ("port", "int", ("--port",), False),
    ("host", "str", ("--host",), False),
    ("enable_metrics", "bool", ("--enable-metrics",), False),
    ("enable_dp_attention", "bool", ("--enable-dp-attention",), False),
    ("attn_dp_size", "int", ("--attn-dp-size", "--attention-data-parallel-size"), False),
    # 0.5.14+: graphs are off per phase with `--cuda-graph-backend-{decode,prefill} disabled`.
    ("cuda_graph_backend_decode", "str", ("--cuda-graph-backend-decode",), False),
    ("cuda_graph_backend_prefill", "str", ("--cuda-graph-backend-prefill",), False),
    ("chunked_prefill_size", "int", ("--chunked-prefill-size",), False),
    ("api_key", "str", ("--api-key",), False),
    ("disable_overlap_schedule", "bool", ("--disable-overlap-schedule",), False),
    ("nnodes", "int", ("--nnodes",), False),
    ("node_rank", "int", ("--node-rank",), False),
    ("dist_init_addr", "str", ("--dist-init-addr", "--nccl-init-addr"), False),
)
_VLLM = _table(
    ("model", "str", ("--model",), False),
    ("tp_size", "int", ("--tensor-parallel-size", "-tp"), False),
    ("pp_size", "int", ("--pipeline-parallel-size", "-pp"), False),
    ("dp_size", "int", ("--data-parallel-size", "-dp"), False),
    ("enable_expert_parallel", "bool", ("--enable-expert-parallel", "-ep"), True),
    ("enforce_eager", "bool", ("--enforce-eager",), True),
    ("async_scheduling", "bool", ("--async-scheduling",), True),
    ("max_running_requests", "int", ("--max-num-seqs",), False),
    ("port", "int", ("--port",), False),
    ("host", "str", ("--host",), False),
    ("nnodes", "int", ("--nnodes", "-n"), False),
    ("node_rank", "int", ("--node-rank", "-r"), False),
    ("master_addr", "str", ("--master-addr",), False),
    ("master_port", "int", ("--master-port",), False),
    ("optimization_level", "str", ("--optimization-level",), False),
    ("device_ids", "str", ("--device-ids",), False),
    ("headless", "bool", ("--headless",), False),
    ("disable_log_stats", "bool", ("--disable-log-stats",), False),
    ("executor_backend", "str", ("--distributed-executor-backend",), False),
    ("api_key", "str", ("--api-key",), False),
)
# trtllm-serve (click): long names with underscores and their short aliases, as in
# tensorrt_llm/commands/serve.py (`--tensor_parallel_size/--tp_size`; newer `--tp`).
_TRTLLM = _table(
    ("model", "str", ("--model",), False),
    ("tp_size", "int", ("--tp_size", "--tensor_parallel_size", "--tp"), False),
    ("pp_size", "int", ("--pp_size", "--pipeline_parallel_size", "--pp"), False),
    ("ep_size", "int", ("--ep_size", "--moe_expert_parallel_size", "--ep"), False),
    ("max_running_requests", "int", ("--max_batch_size",), False),
    ("port", "int", ("--port",), False),
    ("host", "str", ("--host",), False),
    ("backend", "str", ("--backend",), False),
    ("trust_remote_code", "bool", ("--trust_remote_code",), False),
    ("extra_llm_api_options", "str", ("--extra_llm_api_options", "--config"), False),
)
TABLES = {"sglang": _SGLANG, "vllm": _VLLM, "trtllm": _TRTLLM}
# Flags a release renamed: the newest spelling -> older spellings of the same setting,
# newest first (SGLang's per-slot cap was --max-micro-batch-size, live key
# max_micro_batch_size, in 0.4.6.post2-0.5.3; server_args.py of those wheels).
RENAMED: dict[str, dict[str, tuple[str, ...]]] = {
    "sglang": {"--pp-max-micro-batch-size": ("--max-micro-batch-size",)},
}
# Short options that never take their value glued on (`-tp 8`, not `-tp8`).
SHORT_OPTIONS = {
    "vllm": frozenset({"-tp", "-pp", "-dp", "-dpl", "-ep", "-q", "-n", "-r", "-asc", "-ac", "-cc"}),
}

# vLLM's compilation config: -O/--compilation-config/-cc take JSON, a dotted
# key (-cc.cudagraph_mode=NONE) or, for -O, an optimisation level (-O0 .. -O3).
VLLM_CC_FLAGS = ("--compilation-config", "-cc", "-O")
