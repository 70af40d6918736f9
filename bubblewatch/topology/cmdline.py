"""Recognise a serving engine's command line and parse its flags as the engine would.

Supported launchers (docs/topology.md has the table):

- SGLang: `python -m sglang.launch_server ...`, `sglang serve ...`
- vLLM: `vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server ...`
- TensorRT-LLM: `trtllm-serve MODEL ...`

Flags follow argparse/click rules: `--flag value`, `--flag=value`, aliases,
the last occurrence wins, `--no-X` for vLLM's negatable booleans. Unknown
flags are kept in `EngineConfig.flags` (a flag followed by a word that does
not start with `-` is taken to have that word as its value). A malformed
value of a flag bubblewatch relies on raises `EngineArgsError` naming the
flag; it is never silently defaulted. The command line and environment are
redacted before parsing, so no secret reaches the returned `EngineConfig`.

This module reads the values into an `EngineConfig`; the steps before live in
`_launchers` (which engine, where its arguments start), `_flags` (each
engine's flag table) and `_tokenise` (the argparse rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bubblewatch.limits import LIMITS_DOC, TOPOLOGY_MAX_GPUS
from bubblewatch.topology._flags import TABLES
from bubblewatch.topology._launchers import recognise
from bubblewatch.topology._tokenise import EngineArgsError, Parsed, tokenise
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.flagtable import newest_table, table_for
from bubblewatch.topology.redact import redact_argv, redact_env
from bubblewatch.topology.versions import normalise_version

__all__ = [
    "CUDAGRAPH_MODES",
    "LAYER_PARTITION_ENV",
    "SGLANG_DEFAULT_HOST",
    "SGLANG_DEFAULT_PORT",
    "TRTLLM_DEFAULT_HOST",
    "TRTLLM_DEFAULT_PORT",
    "VLLM_DEFAULT_PORT",
    "parse_cuda_visible_devices",
    "parse_engine_cmdline",
    "parse_layer_partition",
]

SGLANG_DEFAULT_PORT = 30000
SGLANG_DEFAULT_HOST = "127.0.0.1"
VLLM_DEFAULT_PORT = 8000
VLLM_DEFAULT_MASTER_PORT = 29501  # ParallelConfig.master_port
TRTLLM_DEFAULT_PORT = 8000
TRTLLM_DEFAULT_HOST = "localhost"
CUDAGRAPH_MODES = frozenset({"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})
LAYER_PARTITION_ENV = {"sglang": "SGLANG_PP_LAYER_PARTITION", "vllm": "VLLM_PP_LAYER_PARTITION"}


class _Reader:
    """Typed access to parsed values with errors that name the flag."""

    def __init__(self, engine: str, parsed: Parsed, where: str) -> None:
        self.engine = engine
        self.parsed = parsed
        self.where = where
        self._flag_of = {o.dest: o.flag for o in TABLES[engine].values()}

    def int_(self, dest: str, default: int | None, *, minimum: int) -> int | None:
        raw = self.parsed.values.get(dest)
        if raw is None:
            return default
        flag = self._flag_of[dest]
        try:
            v = int(str(raw), 10)
        except ValueError:
            raise EngineArgsError(
                f"{flag} expects an integer, got {raw!r}", path=self.where, field=flag
            ) from None
        if v < minimum:
            raise EngineArgsError(
                f"{flag} must be >= {minimum}, got {v}", path=self.where, field=flag
            )
        return v

    def size(self, dest: str) -> int:
        """A parallel size: 1..TOPOLOGY_MAX_GPUS (a pipeline is laid out rank by rank)."""
        v = self.int_(dest, 1, minimum=1)
        assert v is not None
        if v > TOPOLOGY_MAX_GPUS:
            flag = self._flag_of[dest]
            raise EngineArgsError(
                f"{flag} must be at most {TOPOLOGY_MAX_GPUS}, got {v} (see {LIMITS_DOC})",
                path=self.where,
                field=flag,
            )
        return v

    def bool_(self, dest: str) -> bool | None:
        raw = self.parsed.values.get(dest)
        return None if raw is None else bool(raw)

    def str_(self, dest: str) -> str | None:
        raw = self.parsed.values.get(dest)
        return None if raw is None or isinstance(raw, bool) else raw


def parse_layer_partition(text: str, pp_size: int, *, name: str, where: str) -> tuple[int, ...]:
    """Parse "a,b,..." (layers per stage); it must have exactly pp_size positive entries."""
    parts = [p.strip() for p in text.split(",")]
    try:
        layers = tuple(int(p) for p in parts)
    except ValueError:
        raise EngineArgsError(
            f"{name} must be comma-separated integers, got {text!r}", path=where, field=name
        ) from None
    if any(n < 1 for n in layers):
        raise EngineArgsError(f"{name} entries must be >= 1, got {text!r}", path=where, field=name)
    if len(layers) != pp_size:
        raise EngineArgsError(
            f"{name} has {len(layers)} entries but the pipeline has {pp_size} stages",
            path=where,
            field=name,
        )
    return layers


def parse_cuda_visible_devices(text: str | None) -> tuple[str, ...] | None:
    """Split CUDA_VISIBLE_DEVICES; None when unset, () when set but empty."""
    if text is None:
        return None
    return tuple(p.strip() for p in text.split(",") if p.strip())


def parse_engine_cmdline(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    where: str = "<cmdline>",
    version: str | None = None,
) -> EngineConfig | None:
    """Parse an engine's argv (and environment) into an EngineConfig; None if not an engine.

    `where` names the source in error messages (e.g. "/proc/1234/cmdline").
    `version` is the engine's version when known: its flag table decides
    abbreviations and which flags take a value (the newest table otherwise).
    Raises EngineArgsError for a malformed value of a flag that matters.
    """
    launch = recognise(argv)
    if launch is None:
        return None
    raw_env = {**launch.prefix_env, **(env or {})}
    safe_argv = redact_argv(argv)
    safe_env = redact_env(raw_env)
    # Parse the redacted arguments: a secret can never travel into flags.
    engine_args = safe_argv[len(safe_argv) - len(launch.args) :] if launch.args else ()
    version = normalise_version(version)
    known = table_for(launch.engine, version)
    parsed = tokenise(launch.engine, engine_args, where, known or newest_table(launch.engine))
    if known is None:
        parsed.problems.clear()  # only a known version's parser can be said to refuse a flag
    r = _Reader(launch.engine, parsed, where)

    pp_size = r.size("pp_size")
    tp_size = r.size("tp_size")
    if pp_size * tp_size > TOPOLOGY_MAX_GPUS:
        raise EngineArgsError(
            f"pp_size {pp_size} x tp_size {tp_size} is more than {TOPOLOGY_MAX_GPUS} GPUs "
            f"(see {LIMITS_DOC})",
            path=where,
        )
    dp_size = r.size("dp_size") if "dp_size" in r._flag_of else 1
    nnodes = r.size("nnodes") if "nnodes" in r._flag_of else 1
    node_rank = r.int_("node_rank", 0, minimum=0) if "node_rank" in r._flag_of else 0
    assert node_rank is not None
    if node_rank >= nnodes:
        raise EngineArgsError(
            f"--node-rank {node_rank} is not below --nnodes {nnodes}",
            path=where,
            field="--node-rank",
        )
    model = r.str_("model") or (parsed.positionals[0] if parsed.positionals else None)

    partition_env = LAYER_PARTITION_ENV.get(launch.engine)
    layer_partition = None
    if partition_env and raw_env.get(partition_env, "").strip():
        layer_partition = parse_layer_partition(
            raw_env[partition_env], pp_size, name=partition_env, where=where
        )

    common = {
        "name": launch.engine,
        "version": version,
        "problems": tuple(dict.fromkeys(parsed.problems)),
        "pp_size": pp_size,
        "tp_size": tp_size,
        "dp_size": dp_size,
        "nnodes": nnodes,
        "node_rank": node_rank,
        "model": model,
        "layer_partition": layer_partition,
        "flags": parsed.flags,
        "argv": safe_argv,
        "env": safe_env,
        "cuda_visible_devices": parse_cuda_visible_devices(raw_env.get("CUDA_VISIBLE_DEVICES")),
    }
    port_min = 1
    if launch.engine == "sglang":
        off = _sglang_graphs_off(parsed)
        return EngineConfig(
            **common,  # type: ignore[arg-type]
            ep_size=r.size("ep_size"),
            attn_dp_size=r.size("attn_dp_size"),
            pp_async_batch_depth=r.int_("pp_async_batch_depth", 0, minimum=0),
            pp_max_micro_batch_size=r.int_("pp_max_micro_batch_size", None, minimum=1),
            cuda_graph=not off,
            graphs_off_by=off,
            max_running_requests=r.int_("max_running_requests", None, minimum=1),
            base_gpu_id=_req(r.int_("base_gpu_id", 0, minimum=0)),
            gpu_id_step=_req(r.int_("gpu_id_step", 1, minimum=1)),
            port=_port(r.int_("port", SGLANG_DEFAULT_PORT, minimum=port_min), where),
            host=r.str_("host") or SGLANG_DEFAULT_HOST,
            metrics_enabled=bool(r.bool_("enable_metrics")),
            dist_init_addr=r.str_("dist_init_addr"),
        )
    if launch.engine == "vllm":
        mode = _vllm_cudagraph_mode(parsed, where)
        eager = bool(r.bool_("enforce_eager"))
        ep = tp_size * dp_size if r.bool_("enable_expert_parallel") else 1
        headless = bool(r.bool_("headless"))
        stats = not r.bool_("disable_log_stats")
        return EngineConfig(
            **common,  # type: ignore[arg-type]
            ep_size=ep,
            cuda_graph=not eager and mode != "NONE",
            cudagraph_mode="NONE" if eager else mode,
            graphs_off_by=_vllm_graphs_off(parsed, eager, mode),
            async_scheduling=r.bool_("async_scheduling"),
            max_running_requests=r.int_("max_running_requests", None, minimum=1),
            port=_port(r.int_("port", VLLM_DEFAULT_PORT, minimum=port_min), where),
            host=r.str_("host"),
            # The OpenAI server serves request gauges on /metrics unless stats are off
            # (--disable-log-stats: no stat loggers) or no API server runs (--headless).
            metrics_enabled=not headless and stats,
            headless=headless,
            executor_backend=r.str_("executor_backend"),
            device_ids=_device_ids(r.str_("device_ids")),
            dist_init_addr=_vllm_master(r),
        )
    return EngineConfig(
        **common,  # type: ignore[arg-type]
        ep_size=r.size("ep_size"),
        max_running_requests=r.int_("max_running_requests", None, minimum=1),
        port=_port(r.int_("port", TRTLLM_DEFAULT_PORT, minimum=port_min), where),
        host=r.str_("host") or TRTLLM_DEFAULT_HOST,
        metrics_enabled=False,
    )


def _sglang_graphs_off(parsed: Parsed) -> tuple[str, ...]:
    """The flags (as given) that turn SGLang's decode CUDA graphs off.

    `--disable-cuda-graph` (every version; deprecated from 0.5.14) or, from
    0.5.14, `--cuda-graph-backend-decode disabled`.
    """
    off: list[str] = []
    if parsed.values.get("disable_cuda_graph") is True:
        off.append(parsed.spelled.get("--disable-cuda-graph", "--disable-cuda-graph"))
    backend = parsed.values.get("cuda_graph_backend_decode")
    if isinstance(backend, str) and backend.strip().lower() == "disabled":
        off.append("--cuda-graph-backend-decode")
    return tuple(off)


def _vllm_graphs_off(parsed: Parsed, eager: bool, mode: str | None) -> tuple[str, ...]:
    """The flags (canonical spellings) that turn vLLM's CUDA graphs off."""
    off: list[str] = []
    if eager:
        off.append("--enforce-eager")
    if mode == "NONE":
        if "cudagraph_mode" in parsed.compilation:
            dotted = [k for k in parsed.flags if k.endswith(".cudagraph_mode")]
            off.extend(dotted or ["--compilation-config"])
        elif parsed.opt_level == 0:
            off.extend(
                k
                for k in ("-O", "--optimization-level", "--compilation-config")
                if k in parsed.flags
            )
    return tuple(off)


def _device_ids(text: str | None) -> tuple[str, ...] | None:
    """vLLM --device-ids "2,3,5,7": physical GPU indices or UUIDs, in rank order."""
    if text is None:
        return None
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _req(v: int | None) -> int:
    assert v is not None
    return v


def _port(v: int | None, where: str) -> int:
    assert v is not None
    if v > 65535:
        raise EngineArgsError(f"--port must be 1..65535, got {v}", path=where, field="--port")
    return v


def _vllm_master(r: _Reader) -> str | None:
    """vLLM's multi-node rendezvous (multiprocessing backend): --master-addr:--master-port."""
    addr = r.str_("master_addr")
    if not addr:
        return None
    port = r.int_("master_port", VLLM_DEFAULT_MASTER_PORT, minimum=1)
    return f"{addr}:{port}"


def _vllm_cudagraph_mode(parsed: Parsed, where: str) -> str | None:
    raw = parsed.compilation.get("cudagraph_mode")
    if raw is None:
        # -O0 / --optimization-level 0 (0.12+) and compilation level 0 (before) run
        # without CUDA graphs unless cudagraph_mode is set explicitly.
        return "NONE" if parsed.opt_level == 0 else None
    mode = str(raw).strip().upper()
    if mode not in CUDAGRAPH_MODES:
        raise EngineArgsError(
            f"cudagraph_mode must be one of {', '.join(sorted(CUDAGRAPH_MODES))}, got {raw!r}",
            path=where,
            field="--compilation-config",
        )
    return mode
