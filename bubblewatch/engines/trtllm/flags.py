"""The TensorRT-LLM (`trtllm-serve`) flags bubblewatch reads, with their aliases."""

from __future__ import annotations

from bubblewatch.engines.base import option_table

__all__ = ["OPTIONS"]

# trtllm-serve (click): long names with underscores and their short aliases, as in
# tensorrt_llm/commands/serve.py (`--tensor_parallel_size/--tp_size`; newer `--tp`).
OPTIONS = option_table(
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
