"""The vLLM flags bubblewatch reads, with their aliases and value kinds.

Which flags a release accepts at all is the generated table `flags.json`.
"""

from __future__ import annotations

from bubblewatch.engines.base import option_table

__all__ = [
    "CC_KEYS_FROM",
    "COMPILATION_FLAGS",
    "FIRST_DOTTED",
    "LAST_DOTTED_O",
    "OPTIONS",
    "SHORT_OPTIONS",
]

OPTIONS = option_table(
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
# Short options that never take their value glued on (`-tp 8`, not `-tp8`).
SHORT_OPTIONS = frozenset(
    {"-tp", "-pp", "-dp", "-dpl", "-ep", "-q", "-n", "-r", "-asc", "-ac", "-cc"}
)

# The compilation config: -O/--compilation-config/-cc take JSON, a dotted
# key (-cc.cudagraph_mode=NONE) or, for -O, an optimisation level (-O0 .. -O3).
COMPILATION_FLAGS = ("--compilation-config", "-cc", "-O")
# How each release's parser reads them (vllm/utils/argparse_utils.py of the wheels):
LAST_DOTTED_O = "0.12.0"  # the last table whose release rewrites -O.key=v to -cc.key=v
FIRST_DOTTED = "0.9.2"  # the first table whose parser reads --flag.key=value (0.8.5: none)
# Compilation-config keys bubblewatch reads, by the first table whose CompilationConfig has them.
CC_KEYS_FROM = {"cudagraph_mode": "0.10.2"}
