"""The SGLang flags bubblewatch reads, with their aliases and value kinds.

Every spelling of a flag (`--tp-size`, `--tp`, ...) maps to one `Opt`: where
the value goes, its kind, and its canonical spelling (the key in
`EngineConfig.flags`). Flags not in the table are still kept, as text; which
flags a release accepts at all is the generated table `flags.json`.
"""

from __future__ import annotations

from bubblewatch.engines.base import option_table

__all__ = ["OPTIONS", "RENAMED"]

OPTIONS = option_table(
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
# Flags a release renamed: the newest spelling -> older spellings of the same setting,
# newest first (the per-slot cap was --max-micro-batch-size, live key
# max_micro_batch_size, in 0.4.6.post2-0.5.3; server_args.py of those wheels).
RENAMED = {"--pp-max-micro-batch-size": ("--max-micro-batch-size",)}
