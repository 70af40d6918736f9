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
`_launchers` (which engine, where its arguments start) and `_tokenise` (the
argparse rules); each engine's flags, defaults and own fields are its package's
(bubblewatch.engines.<engine>.command).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NoReturn

from bubblewatch import engines
from bubblewatch.engines.flagtable import newest_table, table_for
from bubblewatch.engines.versions import normalise_version
from bubblewatch.limits import LIMITS_DOC, TOPOLOGY_MAX_GPUS
from bubblewatch.topology._launchers import recognise
from bubblewatch.topology._tokenise import EngineArgsError, Parsed, tokenise
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.redact import redact_argv, redact_env

__all__ = [
    "parse_cuda_visible_devices",
    "parse_engine_cmdline",
    "parse_layer_partition",
]


class _Reader:
    """Typed access to parsed values with errors that name the flag."""

    def __init__(self, engine: engines.Engine, parsed: Parsed, where: str) -> None:
        self.engine = engine
        self.parsed = parsed
        self.where = where
        self._flag_of = {o.dest: o.flag for o in engine.command.options.values()}

    @property
    def values(self) -> Mapping[str, str | bool]:
        return self.parsed.values

    @property
    def flags(self) -> Mapping[str, str | bool]:
        return self.parsed.flags

    @property
    def spelled(self) -> Mapping[str, str]:
        return self.parsed.spelled

    @property
    def compilation(self) -> Mapping[str, object]:
        return self.parsed.compilation

    @property
    def opt_level(self) -> int | None:
        return self.parsed.opt_level

    def fail(self, message: str, field: str) -> NoReturn:
        raise EngineArgsError(message, path=self.where, field=field)

    def port(self, default: int) -> int:
        v = self.int_("port", default, minimum=1)
        assert v is not None
        if v > 65535:
            self.fail(f"--port must be 1..65535, got {v}", "--port")
        return v

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
    engine = engines.require(launch.engine)
    raw_env = {**launch.prefix_env, **(env or {})}
    safe_argv = redact_argv(argv)
    safe_env = redact_env(raw_env)
    # Parse the redacted arguments: a secret can never travel into flags.
    engine_args = safe_argv[len(safe_argv) - len(launch.args) :] if launch.args else ()
    version = normalise_version(version)
    known = table_for(launch.engine, version)
    parsed = tokenise(engine, engine_args, where, known or newest_table(launch.engine))
    if known is None:
        parsed.problems.clear()  # only a known version's parser can be said to refuse a flag
    r = _Reader(engine, parsed, where)

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

    partition_env = engine.command.layer_partition_env
    layer_partition = None
    if partition_env and raw_env.get(partition_env, "").strip():
        layer_partition = parse_layer_partition(
            raw_env[partition_env], pp_size, name=partition_env, where=where
        )

    return EngineConfig(
        name=launch.engine,
        version=version,
        problems=tuple(dict.fromkeys(parsed.problems)),
        pp_size=pp_size,
        tp_size=tp_size,
        dp_size=dp_size,
        nnodes=nnodes,
        node_rank=node_rank,
        model=model,
        layer_partition=layer_partition,
        flags=parsed.flags,
        argv=safe_argv,
        env=safe_env,
        cuda_visible_devices=parse_cuda_visible_devices(raw_env.get("CUDA_VISIBLE_DEVICES")),
        **engine.command.read(r),
    )
