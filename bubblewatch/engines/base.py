"""The one interface every serving engine's package fills in: `Engine` and its parts.

An engine package (`bubblewatch/engines/<name>/`) builds one `Engine` out of
plain data and a few pure functions: how it is launched and which flags its
parser reads (`CommandLine`), which gauges tell its load (`LoadMetrics`),
where it serves its version and live settings (`LiveApi`), how its scheduler
keeps micro-batches in flight (`Scheduler`) and how a fix spells its knobs
(`Fixes`). Readers (topology, sources, sim), rules and the daemon look an
engine up by name (`bubblewatch.engines.get`) and ask it, instead of
branching on the engine's name. docs/engines.md describes each part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Protocol

from bubblewatch.engines.versions import version_key

__all__ = [
    "CommandLine",
    "Engine",
    "Fixes",
    "FlagReader",
    "InFlight",
    "Kind",
    "Launcher",
    "LiveApi",
    "LoadMetrics",
    "NoScheduler",
    "Opt",
    "RankOrder",
    "Scheduler",
    "option_table",
]

Kind = Literal["int", "str", "bool"]


@dataclass(frozen=True)
class Opt:
    """One flag bubblewatch reads: where its value goes, its kind, its canonical spelling."""

    dest: str
    kind: Kind
    flag: str  # canonical spelling, used as the key in EngineConfig.flags
    negatable: bool = False  # accepts --no-<name> (argparse BooleanOptionalAction)


def option_table(*specs: tuple[str, Kind, tuple[str, ...], bool]) -> dict[str, Opt]:
    """Every spelling -> its `Opt`, from (dest, kind, spellings (canonical first), negatable)."""
    out: dict[str, Opt] = {}
    for dest, kind, aliases, negatable in specs:
        opt = Opt(dest, kind, aliases[0], negatable)
        for alias in aliases:
            out[alias] = opt
    return out


@dataclass(frozen=True)
class Launcher:
    """One way to start the engine: `python -m NAME` (module) or the program NAME."""

    name: str
    module: bool = False
    subcommand: str | None = None  # a word that must follow (`vllm serve`)
    subcommand_optional: bool = False  # `trtllm-serve [serve] MODEL`


class FlagReader(Protocol):
    """Typed access to a parsed command line, with errors that name the flag.

    Handed to `CommandLine.read` by the topology parser, which owns the tokeniser.
    """

    @property
    def values(self) -> Mapping[str, str | bool]: ...  # by dest
    @property
    def flags(self) -> Mapping[str, str | bool]: ...  # by canonical flag
    @property
    def spelled(self) -> Mapping[str, str]: ...  # canonical flag -> as given
    @property
    def compilation(self) -> Mapping[str, object]: ...  # vLLM's compilation config keys
    @property
    def opt_level(self) -> int | None: ...
    def int_(self, dest: str, default: int | None, *, minimum: int) -> int | None: ...
    def size(self, dest: str) -> int: ...
    def bool_(self, dest: str) -> bool | None: ...
    def str_(self, dest: str) -> str | None: ...
    def port(self, default: int) -> int: ...
    def fail(self, message: str, field: str) -> NoReturn: ...


def _no_fields(r: FlagReader) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True)
class CommandLine:
    """How the engine is launched and what its parser reads."""

    package: str  # the distribution whose dist-info gives the installed version
    launchers: tuple[Launcher, ...]
    options: Mapping[str, Opt]
    # The newest spelling of a renamed flag -> its older spellings, newest first.
    renamed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Short options that never take their value glued on (`-tp 8`, not `-tp8`).
    short_options: frozenset[str] = frozenset()
    underscores_as_dashes: bool = False  # the parser reads `--flag_name` as `--flag-name`
    compilation_flags: tuple[str, ...] = ()  # flags holding a compilation config (vLLM -O/-cc)
    default_port: int | None = None
    default_host: str | None = None
    layer_partition_env: str | None = None  # "a,b,..." layers per stage
    rendezvous_flag: str | None = None  # the address every node of a multi-node run dials
    process_title: str | None = None  # prefix of its workers' titles (`sglang::`)
    wrappers: tuple[str, ...] = ()  # programs that launch it (`trtllm-llmapi-launch ...`)
    # The EngineConfig fields only this engine has, read from its parsed flags.
    read: Callable[[FlagReader], Mapping[str, Any]] = _no_fields


@dataclass(frozen=True)
class LoadMetrics:
    """The gauges that tell the engine's load, and how its series combine.

    Series of one replica's ranks (`rank_labels`) report the same requests:
    their maximum counts once; the remaining label sets (replicas) are summed.
    With several values of `micro_batch_label` the running gauge counts one
    micro-batch only (a lower bound of all running requests).
    """

    running: str | None = None
    queued: str | None = None
    rank_labels: frozenset[str] = frozenset()
    micro_batch_label: str | None = None
    format: Literal["prometheus", "json", "none"] = "prometheus"
    served_by_default: bool = False  # /metrics without an opt-in flag

    def per_micro_batch(self, labelsets: Iterable[Mapping[str, str]]) -> bool:
        """Whether the running gauge counts one micro-batch (several pipeline ranks report)."""
        label = self.micro_batch_label
        if label is None:
            return False
        return len({ls[label] for ls in labelsets if label in ls}) > 1


@dataclass(frozen=True)
class LiveApi:
    """Where the engine serves its version and live settings, and how a live change answers."""

    version_paths: tuple[str, ...] = ()  # JSON with a "version" key, asked in order
    # Where the live settings are served, in the order to ask: (path, first release or None).
    state_paths: tuple[tuple[str, str | None], ...] = ()
    set_path: str | None = None  # POST {"server_args": {...}} changes settings live
    reply_trusted_from: str | None = None  # from this release the reply is the verdict
    cap_keys: tuple[str, ...] = ()  # the per-slot cap's live key, newest name first
    api_key_flag: str = "--api-key"
    api_key_env: str | None = None  # the variable a rendered curl reads the key from
    admin_key_flag: str | None = None
    admin_key_env: str | None = None

    def paths_for(self, version: str | None) -> tuple[str, ...]:
        """The live-settings paths `version` serves, in the order to ask; () where none."""
        key = _key(version)
        out = []
        for path, first in self.state_paths:
            since = _key(first)
            if key is None or since is None or key >= since:
                out.append(path)
        return tuple(out)

    def reply_trusted(self, version: str | None) -> bool:
        """Whether this release's answer to a live change is the scheduler's verdict."""
        key, first = _key(version), _key(self.reply_trusted_from)
        return key is not None and first is not None and key >= first


def _key(version: str | None) -> tuple[Any, ...] | None:
    if version is None:
        return None
    try:
        return version_key(version)
    except ValueError:
        return None


@dataclass(frozen=True)
class InFlight:
    """Batches in flight, whether async scheduling runs, and why."""

    batches: int
    async_scheduling: bool
    v2_runner: bool | None  # None: the release picks by architecture, unknown here
    refused: bool  # the engine refuses to start with these settings
    why: str


class Scheduler(Protocol):
    """How the engine's scheduler fills a pipeline: its policy numbers and formulas."""

    @property
    def async_depth(self) -> bool: ...  # has an async batch depth setting

    def micro_batch_slots(self, pp_size: int, depth: int) -> int | None:
        """Micro-batch slots the scheduler cycles over; None where it keeps no slots."""
        ...

    def default_micro_batch_cap(self, max_running: int, pp_size: int) -> int | None:
        """The per-slot cap when unset; None where the engine has none."""
        ...

    def batches_in_flight(
        self, version: str | None, pp_size: int, *, async_flag: bool | None, v2_env: bool | None
    ) -> InFlight | None:
        """Batches the release keeps queued for these settings; None where slots decide."""
        ...

    def overlaps_cpu(self, pp_size: int) -> bool:
        """Whether the scheduler prepares the next batch during this one, by default."""
        ...

    def runner_env(self, env: Mapping[str, str]) -> bool | None:
        """The model runner the environment picks (vLLM's V2 runner), None if it picks none."""
        ...


@dataclass(frozen=True)
class NoScheduler:
    """An engine whose scheduler bubblewatch does not model."""

    async_depth: bool = False

    def micro_batch_slots(self, pp_size: int, depth: int) -> int | None:
        return None

    def default_micro_batch_cap(self, max_running: int, pp_size: int) -> int | None:
        return None

    def batches_in_flight(
        self, version: str | None, pp_size: int, *, async_flag: bool | None, v2_env: bool | None
    ) -> InFlight | None:
        return None

    def overlaps_cpu(self, pp_size: int) -> bool:
        return False

    def runner_env(self, env: Mapping[str, str]) -> bool | None:
        return None


@dataclass(frozen=True)
class Fixes:
    """How a fix spells the engine's knobs."""

    cap_flag: str | None = None  # the per-slot micro-batch cap, newest spelling
    # The decode CUDA-graph batch-size flag, newest first, and what to say without a table.
    graph_bs_flags: tuple[str, ...] = ()
    graph_bs_unknown: str | None = None
    # A simulator parallel field -> (the flags that set it, the one to write); a bool
    # field is a presence flag that turns the setting off.
    setting_flags: Mapping[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    async_flags: tuple[str, str] | None = None  # (on, off) spellings of async scheduling


@dataclass(frozen=True)
class RankOrder:
    """Rank r = pp_rank * tp_size + tp_rank on CUDA device r, `per_node` ranks a node.

    vLLM and TensorRT-LLM place their ranks so; an engine that places them
    otherwise (SGLang) overrides these methods.
    """

    multi_node: bool = False  # reads --nnodes/--node-rank (a node's share of the pipeline)

    def dp_inside_tp(self, flags: Mapping[str, str | bool], attn_dp_size: int) -> bool:
        """Whether data parallelism runs inside one TP group (one replica, not dp_size)."""
        return False

    def first_stage(self, pp: int, tp: int, nnodes: int, node_rank: int) -> int:
        """Global pipeline stage of the first stage node `node_rank` runs."""
        ranks_per_node = max(pp * tp // max(nnodes, 1), 1)
        return min(node_rank * ranks_per_node // tp, pp - 1)

    def device_ordinals(
        self,
        pp: int,
        tp: int,
        nnodes: int,
        node_rank: int,
        base_gpu_id: int,
        gpu_id_step: int,
        dp_rank: int,
    ) -> list[list[int]]:
        """CUDA device ordinal of each local (pp, tp) rank: result[stage][tp_rank]."""
        world = pp * tp
        per_node = max(world // max(nnodes, 1), 1)
        first = node_rank * per_node
        base = dp_rank * world
        stages: list[list[int]] = []
        for p in range(pp):
            local = [
                base + (p * tp + t) - first
                for t in range(tp)
                if first <= p * tp + t < first + per_node
            ]
            if local:
                stages.append(local)
        return stages


@dataclass(frozen=True)
class Engine:
    """One serving engine's knowledge, looked up by name."""

    name: str  # as facts, rules and topology files name it ("sglang")
    title: str  # as people write it ("SGLang")
    command: CommandLine
    metrics: LoadMetrics = LoadMetrics(format="none")
    live: LiveApi = LiveApi()
    scheduler: Scheduler = NoScheduler()
    fixes: Fixes = Fixes()
    placement: RankOrder = RankOrder()
    # The package holding the generated flag table `flags.json`, or None without one.
    flag_data: str | None = None
