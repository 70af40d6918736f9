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
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from bubblewatch.sources.errors import InputError
from bubblewatch.topology.engine import EngineConfig
from bubblewatch.topology.redact import redact_argv, redact_env

Kind = Literal["int", "str", "bool"]

SGLANG_DEFAULT_PORT = 30000
SGLANG_DEFAULT_HOST = "127.0.0.1"
VLLM_DEFAULT_PORT = 8000
TRTLLM_DEFAULT_PORT = 8000
TRTLLM_DEFAULT_HOST = "localhost"
CUDAGRAPH_MODES = frozenset({"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})
LAYER_PARTITION_ENV = {"sglang": "SGLANG_PP_LAYER_PARTITION", "vllm": "VLLM_PP_LAYER_PARTITION"}


class EngineArgsError(InputError):
    """An engine flag or variable with a value the engine itself would reject."""


@dataclass(frozen=True)
class _Opt:
    dest: str
    kind: Kind
    flag: str  # canonical spelling, used as the key in EngineConfig.flags
    negatable: bool = False  # accepts --no-<name> (argparse BooleanOptionalAction)


def _table(*specs: tuple[str, Kind, tuple[str, ...], bool]) -> dict[str, _Opt]:
    out: dict[str, _Opt] = {}
    for dest, kind, aliases, negatable in specs:
        opt = _Opt(dest, kind, aliases[0], negatable)
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
    ("pp_max_micro_batch_size", "int", ("--pp-max-micro-batch-size",), False),
    ("disable_cuda_graph", "bool", ("--disable-cuda-graph",), False),
    ("cuda_graph_max_bs", "int", ("--cuda-graph-max-bs",), False),
    ("max_running_requests", "int", ("--max-running-requests",), False),
    ("base_gpu_id", "int", ("--base-gpu-id",), False),
    ("gpu_id_step", "int", ("--gpu-id-step",), False),
    ("port", "int", ("--port",), False),
    ("host", "str", ("--host",), False),
    ("enable_metrics", "bool", ("--enable-metrics",), False),
    ("enable_dp_attention", "bool", ("--enable-dp-attention",), False),
    ("disable_overlap_schedule", "bool", ("--disable-overlap-schedule",), False),
    ("nnodes", "int", ("--nnodes",), False),
    ("node_rank", "int", ("--node-rank",), False),
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
    ("nnodes", "int", ("--nnodes",), False),
    ("node_rank", "int", ("--node-rank",), False),
)
_TRTLLM = _table(
    ("model", "str", ("--model",), False),
    ("tp_size", "int", ("--tp_size",), False),
    ("pp_size", "int", ("--pp_size",), False),
    ("ep_size", "int", ("--ep_size",), False),
    ("max_running_requests", "int", ("--max_batch_size",), False),
    ("port", "int", ("--port",), False),
    ("host", "str", ("--host",), False),
)
_TABLES = {"sglang": _SGLANG, "vllm": _VLLM, "trtllm": _TRTLLM}

# vLLM's compilation config: -O/--compilation-config/-cc take JSON, a dotted
# key (-cc.cudagraph_mode=NONE) or, for -O, an optimisation level (-O0 .. -O3).
_VLLM_CC_FLAGS = ("--compilation-config", "-cc", "-O")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_PYTHON_OPTS_WITH_ARG = frozenset({"-X", "-W", "-Q"})
_WRAPPERS = frozenset({"nohup", "trtllm-llmapi-launch"})


@dataclass(frozen=True)
class _Launch:
    engine: str
    args: tuple[str, ...]  # the engine's own arguments (after the subcommand)
    prefix_env: dict[str, str]


def _recognise(argv: Sequence[str]) -> _Launch | None:
    """Find the engine and where its own arguments start, skipping python and wrappers."""
    args = list(argv)
    prefix_env: dict[str, str] = {}
    while args:
        prog = os.path.basename(args[0])
        if prog == "env":
            args = args[1:]
            while args and ("=" in args[0] and not args[0].startswith("-")):
                k, _, v = args[0].partition("=")
                prefix_env[k] = v
                args = args[1:]
            continue
        if prog in _WRAPPERS:
            args = args[1:]
            continue
        break
    if not args:
        return None
    prog = os.path.basename(args[0])
    rest = args[1:]
    if _PYTHON.match(prog):
        i = 0
        while i < len(rest):
            a = rest[i]
            if a == "-m" and i + 1 < len(rest):
                return _by_module(rest[i + 1], rest[i + 2 :], prefix_env)
            if a.startswith("-m") and len(a) > 2:
                return _by_module(a[2:], rest[i + 1 :], prefix_env)
            if a in _PYTHON_OPTS_WITH_ARG:
                i += 2
                continue
            if a == "-c" or not a.startswith("-"):
                if a == "-c":
                    return None
                # `python /usr/bin/vllm serve ...`: the script is the entry point.
                return _by_entry_point(os.path.basename(a), rest[i + 1 :], prefix_env)
            i += 1
        return None
    return _by_entry_point(prog, rest, prefix_env)


def _by_module(module: str, rest: list[str], env: dict[str, str]) -> _Launch | None:
    if module == "sglang.launch_server":
        return _Launch("sglang", tuple(rest), env)
    if module in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
        return _Launch("vllm", tuple(rest), env)
    if module in ("vllm.entrypoints.cli.main", "vllm") and rest[:1] == ["serve"]:
        return _Launch("vllm", tuple(rest[1:]), env)
    if module in ("sglang.cli.main", "sglang") and rest[:1] == ["serve"]:
        return _Launch("sglang", tuple(rest[1:]), env)
    return None


def _by_entry_point(prog: str, rest: list[str], env: dict[str, str]) -> _Launch | None:
    if prog == "sglang" and rest[:1] == ["serve"]:
        return _Launch("sglang", tuple(rest[1:]), env)
    if prog == "vllm" and rest[:1] == ["serve"]:
        return _Launch("vllm", tuple(rest[1:]), env)
    if prog == "trtllm-serve":
        return _Launch("trtllm", tuple(rest[1:] if rest[:1] == ["serve"] else rest), env)
    return None


def detect_engine(argv: Sequence[str]) -> str | None:
    """The engine a command line launches ("sglang", "vllm", "trtllm"), or None."""
    launch = _recognise(argv)
    return None if launch is None else launch.engine


@dataclass
class _Parsed:
    values: dict[str, str | bool]
    flags: dict[str, str | bool]
    positionals: list[str]
    compilation: dict[str, object]
    opt_level: int | None = None


def _parse_vllm_compilation(name: str, value: str | None, parsed: _Parsed, where: str) -> bool:
    """Handle -O/-cc/--compilation-config in all spellings; False if `name` is not one."""
    for base in _VLLM_CC_FLAGS:
        if name == base:
            break
        if name.startswith(base + "."):
            if value is None:
                raise EngineArgsError(f"{name} expects a value", path=where, field=name)
            parsed.compilation[name[len(base) + 1 :]] = value
            parsed.flags[name] = value
            return True
        if base == "-O" and len(name) == 3 and name[2].isdigit() and name.startswith("-O"):
            parsed.opt_level = int(name[2])
            parsed.flags["-O"] = name[2]
            return True
    else:
        return False
    if value is None:
        raise EngineArgsError(f"{name} expects a value", path=where, field=name)
    parsed.flags["--compilation-config" if name != "-O" else "-O"] = value
    text = value.strip()
    if name == "-O" and text.isdigit():
        parsed.opt_level = int(text)
        return True
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise EngineArgsError(
            f"{name} expects JSON (or -O0..-O3), got {value!r}: {e.msg}", path=where, field=name
        ) from e
    if not isinstance(obj, dict):
        raise EngineArgsError(
            f"{name} expects a JSON object, got {value!r}", path=where, field=name
        )
    parsed.compilation.update(obj)
    return True


def _tokenise(engine: str, args: Sequence[str], where: str) -> _Parsed:
    table = _TABLES[engine]
    parsed = _Parsed(values={}, flags={}, positionals=[], compilation={})
    i = 0
    while i < len(args):
        arg = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == "--":
            parsed.positionals.extend(args[i + 1 :])
            break
        if not arg.startswith("-") or arg == "-" or _is_number(arg):
            parsed.positionals.append(arg)
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        value: str | None = inline if eq else None
        if engine == "vllm":
            takes_next = value is None and nxt is not None and not _is_option(nxt)
            if _parse_vllm_compilation(
                name, value if eq else (nxt if takes_next else None), parsed, where
            ):
                is_level = name.startswith("-O") and len(name) == 3 and name[2].isdigit()
                i += 1 if (eq or is_level) else 2
                continue
        opt = table.get(name)
        negated = False
        if opt is None and name.startswith("--no-"):
            cand = table.get("--" + name[5:])
            if cand is not None and cand.negatable:
                opt, negated = cand, True
        if opt is None:
            if eq:
                parsed.flags[name] = inline
            elif nxt is not None and not _is_option(nxt):
                parsed.flags[name] = nxt
                i += 1
            else:
                parsed.flags[name] = True
            i += 1
            continue
        if opt.kind == "bool":
            flag_value = not negated
            if eq:
                flag_value = _parse_bool(inline, name, where)
            parsed.values[opt.dest] = flag_value
            parsed.flags[opt.flag] = flag_value
            i += 1
            continue
        if value is None:
            if nxt is None or nxt.startswith("--"):
                raise EngineArgsError(f"{name} expects a value", path=where, field=name)
            value = nxt
            i += 1
        parsed.values[opt.dest] = value
        parsed.flags[opt.flag] = value
        i += 1
    return parsed


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _is_option(s: str) -> bool:
    return s.startswith("-") and s != "-" and not _is_number(s)


def _parse_bool(text: str, name: str, where: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise EngineArgsError(f"{name} expects a boolean, got {text!r}", path=where, field=name)


class _Reader:
    """Typed access to parsed values with errors that name the flag."""

    def __init__(self, engine: str, parsed: _Parsed, where: str) -> None:
        self.engine = engine
        self.parsed = parsed
        self.where = where
        self._flag_of = {o.dest: o.flag for o in _TABLES[engine].values()}

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
        v = self.int_(dest, 1, minimum=1)
        assert v is not None
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
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, where: str = "<cmdline>"
) -> EngineConfig | None:
    """Parse an engine's argv (and environment) into an EngineConfig; None if not an engine.

    `where` names the source in error messages (e.g. "/proc/1234/cmdline").
    Raises EngineArgsError for a malformed value of a flag that matters.
    """
    launch = _recognise(argv)
    if launch is None:
        return None
    raw_env = {**launch.prefix_env, **(env or {})}
    safe_argv = redact_argv(argv)
    safe_env = redact_env(raw_env)
    # Parse the redacted arguments: a secret can never travel into flags.
    engine_args = safe_argv[len(safe_argv) - len(launch.args) :] if launch.args else ()
    parsed = _tokenise(launch.engine, engine_args, where)
    r = _Reader(launch.engine, parsed, where)

    pp_size = r.size("pp_size")
    tp_size = r.size("tp_size")
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
        return EngineConfig(
            **common,  # type: ignore[arg-type]
            ep_size=r.size("ep_size"),
            pp_async_batch_depth=r.int_("pp_async_batch_depth", 0, minimum=0),
            pp_max_micro_batch_size=r.int_("pp_max_micro_batch_size", None, minimum=1),
            cuda_graph=not r.bool_("disable_cuda_graph"),
            max_running_requests=r.int_("max_running_requests", None, minimum=1),
            base_gpu_id=_req(r.int_("base_gpu_id", 0, minimum=0)),
            gpu_id_step=_req(r.int_("gpu_id_step", 1, minimum=1)),
            port=_port(r.int_("port", SGLANG_DEFAULT_PORT, minimum=port_min), where),
            host=r.str_("host") or SGLANG_DEFAULT_HOST,
            metrics_enabled=bool(r.bool_("enable_metrics")),
        )
    if launch.engine == "vllm":
        mode = _vllm_cudagraph_mode(parsed, where)
        eager = bool(r.bool_("enforce_eager"))
        ep = tp_size * dp_size if r.bool_("enable_expert_parallel") else 1
        return EngineConfig(
            **common,  # type: ignore[arg-type]
            ep_size=ep,
            cuda_graph=not eager and mode != "NONE",
            cudagraph_mode="NONE" if eager else mode,
            async_scheduling=r.bool_("async_scheduling"),
            max_running_requests=r.int_("max_running_requests", None, minimum=1),
            port=_port(r.int_("port", VLLM_DEFAULT_PORT, minimum=port_min), where),
            host=r.str_("host"),
            # vLLM's OpenAI server always serves /metrics.
            metrics_enabled=True,
        )
    return EngineConfig(
        **common,  # type: ignore[arg-type]
        ep_size=r.size("ep_size"),
        max_running_requests=r.int_("max_running_requests", None, minimum=1),
        port=_port(r.int_("port", TRTLLM_DEFAULT_PORT, minimum=port_min), where),
        host=r.str_("host") or TRTLLM_DEFAULT_HOST,
        metrics_enabled=False,
    )


def _req(v: int | None) -> int:
    assert v is not None
    return v


def _port(v: int | None, where: str) -> int:
    assert v is not None
    if v > 65535:
        raise EngineArgsError(f"--port must be 1..65535, got {v}", path=where, field="--port")
    return v


def _vllm_cudagraph_mode(parsed: _Parsed, where: str) -> str | None:
    raw = parsed.compilation.get("cudagraph_mode")
    if raw is None:
        # -O0 turns CUDA graphs off (vLLM's optimisation levels); other levels keep them.
        return "NONE" if parsed.opt_level == 0 else None
    mode = str(raw).strip().upper()
    if mode not in CUDAGRAPH_MODES:
        raise EngineArgsError(
            f"cudagraph_mode must be one of {', '.join(sorted(CUDAGRAPH_MODES))}, got {raw!r}",
            path=where,
            field="--compilation-config",
        )
    return mode
