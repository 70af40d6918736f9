"""The facts schema: every name a rule may use, with its type and meaning.

The schema is data. The expression checker walks expressions against it (an
unknown name is a load-time error), `build_facts` coerces values to it, rule
tests validate the facts they give against it, and `docs/facts.md` is
generated from it (`bubblewatch rules facts`), so the four cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bubblewatch.detect.types import EVIDENCE_KEYS

FACTS_VERSION = 1

SCALAR_KINDS = ("bool", "int", "double", "string")


@dataclass(frozen=True)
class Scalar:
    """A bool, int, double or string; `nullable` when it may be unknown (null)."""

    kind: str
    nullable: bool = True

    def describe(self) -> str:
        return self.kind + ("?" if self.nullable else "")


@dataclass(frozen=True)
class ListOf:
    """A list whose elements all have one type; `nullable` when the whole list may be null."""

    elem: FieldType
    nullable: bool = False

    def describe(self) -> str:
        return f"list<{self.elem.describe()}>" + ("?" if self.nullable else "")


@dataclass(frozen=True)
class MapOf:
    """A map with string keys not known in advance: index it (`m["k"]`) or test `"k" in m`."""

    value: FieldType

    def describe(self) -> str:
        return f"map<string, {self.value.describe()}>"


@dataclass(frozen=True)
class Struct:
    """A record with named fields, each documented."""

    name: str
    fields: Mapping[str, Field] = field(default_factory=dict)

    def describe(self) -> str:
        return self.name


FieldType = Scalar | ListOf | MapOf | Struct


@dataclass(frozen=True)
class Field:
    type: FieldType
    doc: str


def _s(kind: str, doc: str, nullable: bool = True) -> Field:
    return Field(Scalar(kind, nullable), doc)


# Types of the detector's evidence keys (docs of each come from EVIDENCE_KEYS itself).
_EVIDENCE_TYPES: dict[str, FieldType] = {
    "signal": Scalar("string"),
    "pp_size": Scalar("int"),
    "tp_size": Scalar("int"),
    "concurrency": Scalar("double"),
    "bubble_ratio": Scalar("double"),
    "mean_occupancy_ratio": Scalar("double"),
    "lag_rank_correlation": Scalar("double"),
    "spin_ratio": Scalar("double"),
    "launch_bound_index": Scalar("double"),
    "imbalance_ratio": Scalar("double"),
    "imbalanced_stage": Scalar("int"),
    "straggler_gpu": Scalar("int"),
    "throttle_reasons": ListOf(Scalar("string", nullable=False)),
    "bubble_energy_j": Scalar("double"),
    "topology_agreement": Scalar("bool"),
    "running_requests": Scalar("double"),
    "running_requests_source": Scalar("string"),
    "micro_batch_requests": Scalar("double"),
    "queued_requests": Scalar("double"),
    "pipeline_evidence": Scalar("string"),
    "stagger_p_value": Scalar("double"),
    "concurrency_uncertainty": Scalar("double"),
    "micro_batches_in_flight": Scalar("double"),
    "micro_batches_allowed": Scalar("int"),
    "expected_bubble_ratio": Scalar("double"),
    "expected_formula": Scalar("string"),
    "schedule_efficiency_ratio": Scalar("double"),
    "measured_bubble_ratio": Scalar("double"),
    "schedule_excess_ratio": Scalar("double"),
    "schedule_judgement": Scalar("string"),
    "excess_cause": Scalar("string"),
    "excess_stage": Scalar("int"),
    "imbalance_bubble_ratio": Scalar("double"),
    "step_period_s": Scalar("double"),
    "stage_busy_s": ListOf(Scalar("double", nullable=False)),
    "wave_order": ListOf(Scalar("int", nullable=False)),
    "wave_rank_correlation": Scalar("double"),
    "holding_gpus": ListOf(Scalar("int", nullable=False)),
    "waiting_gpus": ListOf(Scalar("int", nullable=False)),
    "collective_wait_s": Scalar("double"),
    "collective_wait_energy_j": Scalar("double"),
}

FINDING = Struct(
    "finding",
    {
        "verdict": _s("string", "the finding's verdict", nullable=False),
        "confidence": _s("double", "0..1", nullable=False),
        "summary": _s("string", "the detector's sentence", nullable=False),
        "stage": _s("int", "stage the finding is about, or null"),
        "gpu": _s("int", "GPU the finding is about, or null"),
    },
)

STAGE = Struct(
    "stage",
    {
        "stage": _s("int", "stage index, 0 first", nullable=False),
        "gpus": Field(ListOf(Scalar("int", nullable=False)), "GPU indices of the stage"),
        "occupancy_ratio": _s("double", "share of the window the stage was doing work"),
        "sm_active_ratio": _s("double", "mean SM activity"),
        "kernel_busy_ratio": _s("double", "mean kernel-busy ratio (utilization.gpu)"),
        "power_w": _s("double", "mean power"),
        "idle_power_w": _s("double", "estimated idle power"),
        "spin_ratio": _s("double", "share of time in NCCL spin (kernel busy, SMs idle)"),
        "lag_s": _s("double", "lag of load changes behind stage 0"),
        "bubble_energy_j": _s("double", "energy above idle spent not doing useful work"),
        "time_share_ratio": _s(
            "double", "this stage's share of the summed stage occupancies (0..1)"
        ),
    },
)

GPU = Struct(
    "gpu",
    {
        "index": _s("int", "NVML index", nullable=False),
        "name": _s("string", "GPU model name, or null"),
        "power_limit_w": _s("double", "power limit, or null"),
        "stage": _s("int", "pipeline stage of this GPU, or null"),
    },
)

# A training job's layout and schedule (built by bubblewatch.rules.training_facts).
TRAINING_SUGGEST = Struct(
    "training_suggest",
    {
        "micro_batches": _s("int", "micro-batches per step to aim for: 4 x pp_size (null: none)"),
        "micro_batch_size": _s(
            "int", "micro batch size that gives them at the same global batch, if it divides"
        ),
        "global_batch_size": _s("int", "global batch that gives them at the same micro batch"),
        "gradient_accumulation_steps": _s("int", "DeepSpeed: the same as micro_batches"),
        "bubble_ratio": _s("double", "the schedule's bubble with those micro-batches"),
        "virtual_stages": _s("int", "model chunks per rank for an interleaved schedule, or null"),
        "layers_per_virtual_stage": _s(
            "int", "Megatron --num-layers-per-virtual-pipeline-stage for them, or null"
        ),
        "bubble_ratio_interleaved": _s(
            "double", "the bubble with the interleaved schedule at the current micro-batches"
        ),
        "first_stage_layers": _s(
            "int", "layers for the first stage that balance measured stage times, or null"
        ),
        "last_stage_layers": _s("int", "layers for the last stage likewise, or null"),
    },
)

TRAINING = Struct(
    "training",
    {
        "known": _s("bool", "true for a discovered training job", nullable=False),
        "framework": _s("string", "'megatron', 'nemo', 'deepspeed', 'torchtitan' or 'torch'"),
        "launcher": _s("string", "'torchrun', 'deepspeed', 'accelerate', 'srun', 'none'"),
        "pipeline": _s("bool", "true when pp_size > 1", nullable=False),
        "schedule": _s("string", "the schedule as the framework names it"),
        "schedule_kind": _s("string", "'none', 'fill_drain', 'interleaved' or 'zero_bubble'"),
        "pp_size": _s("int", "pipeline stages"),
        "tp_size": _s("int", "tensor-parallel size"),
        "dp_size": _s("int", "data-parallel replicas"),
        "cp_size": _s("int", "context-parallel size"),
        "ep_size": _s("int", "expert-parallel size"),
        "virtual_stages": _s("int", "model chunks per rank (1: not interleaved)"),
        "micro_batch_size": _s("int", "samples per micro-batch"),
        "global_batch_size": _s("int", "samples per optimizer step"),
        "micro_batches": _s("int", "m: micro-batches each pipeline runs per step"),
        "num_layers": _s("int", "transformer layers, when the flags say"),
        "config_file": _s("string", "the config file the layout was read from, or null"),
        "expected_bubble_ratio": _s(
            "double", "the schedule's bubble: (p-1)/(m+p-1), (p-1)/(v*m+p-1), 0 for zero-bubble"
        ),
        "expected_formula": _s("string", "that formula with the job's numbers"),
        "suggest": Field(TRAINING_SUGGEST, "figures for the fixes"),
    },
)


SCHEMA = Struct(
    "facts",
    {
        "version": _s("int", "facts schema version (1)", nullable=False),
        "diagnosis": Field(
            Struct(
                "diagnosis",
                {
                    "verdict": _s("string", "primary verdict (a Verdict value)", nullable=False),
                    "confidence": _s("double", "confidence of the primary verdict", False),
                    "verdicts": Field(
                        ListOf(Scalar("string", nullable=False)),
                        "verdicts of all findings, primary first",
                    ),
                    "confidences": Field(
                        MapOf(Scalar("double", nullable=False)),
                        "confidence by verdict, for every finding (`'launch_bound' in ...`)",
                    ),
                    "load_limited": _s(
                        "bool", "serialized only: true when too little work to fill the pipeline"
                    ),
                    "window_s": _s("double", "length of the analysed window", nullable=False),
                    "n_samples": _s("int", "samples in the window", nullable=False),
                    "findings": Field(ListOf(FINDING), "all findings, primary first"),
                },
            ),
            "the detector's diagnosis",
        ),
        "evidence": Field(
            Struct(
                "evidence",
                {k: Field(_EVIDENCE_TYPES[k], doc) for k, doc in EVIDENCE_KEYS.items()},
            ),
            "the detector's evidence keys (null when not measurable)",
        ),
        "stages": Field(ListOf(STAGE), "per-stage figures, in pipeline order"),
        "gpus": Field(ListOf(GPU), "GPUs analysed, with identity"),
        "engine": Field(
            Struct(
                "engine",
                {
                    "known": _s("bool", "true when the engine configuration is known", False),
                    "argv_known": _s("bool", "true when the command line is known", False),
                    "name": _s("string", "'sglang', 'vllm', 'trtllm', or null"),
                    "version": _s(
                        "string",
                        "engine version (discovered from its site-packages or endpoint, or "
                        "given with --engine-version), or null",
                    ),
                    "version_known": _s("bool", "true when the version is known", False),
                    "flag_table": _s(
                        "string",
                        "the release whose flag table judges this version's command line "
                        "(docs/topology.md), or null when none applies",
                    ),
                    "accepted_flags": Field(
                        MapOf(Scalar("bool", nullable=False)),
                        "every flag spelling the version's parser accepts (value: true when "
                        "deprecated); empty when no flag table applies",
                    ),
                    "graphs_off_by": Field(
                        ListOf(Scalar("string", nullable=False)),
                        "the flags, as given, that turn CUDA graphs off",
                    ),
                    "problems": Field(
                        ListOf(Scalar("string", nullable=False)),
                        "what the version's parser would refuse in the command line",
                    ),
                    "graph_bs_flag": _s(
                        "string",
                        "the spelling of the decode CUDA-graph batch-size flag this version "
                        "accepts (SGLang --cuda-graph-max-bs, --cuda-graph-max-bs-decode from "
                        "0.5.14), or null",
                    ),
                    "live_update": _s(
                        "bool",
                        "true when the running server takes pp_max_micro_batch_size live "
                        "(SGLang POST /set_internal_state, 0.5.3.post1+)",
                        False,
                    ),
                    "base_url": _s("string", "the engine's HTTP server, or null"),
                    "pp_size": _s("int", "pipeline-parallel size"),
                    "tp_size": _s("int", "tensor-parallel size"),
                    "ep_size": _s("int", "expert-parallel size"),
                    "pp_async_batch_depth": _s("int", "SGLang --pp-async-batch-depth"),
                    "pp_max_micro_batch_size": _s(
                        "int", "SGLang --pp-max-micro-batch-size (null: unset)"
                    ),
                    "micro_batch_size": _s(
                        "int",
                        "effective micro-batch cap: pp_max_micro_batch_size, else "
                        "max(max_running_requests // pp_size, 1); null if unknown",
                    ),
                    "cuda_graph": _s("bool", "false when CUDA graphs are off"),
                    "cudagraph_mode": _s("string", "vLLM cudagraph_mode, or null"),
                    "max_running_requests": _s(
                        "int", "--max-running-requests (SGLang) / --max-num-seqs (vLLM)"
                    ),
                    "layer_partition": Field(
                        ListOf(Scalar("int", nullable=False), nullable=True),
                        "layers per stage from *_PP_LAYER_PARTITION, or null",
                    ),
                    "num_layers": _s("int", "model layers (sum of layer_partition), or null"),
                    "flags": Field(
                        MapOf(Scalar("string", nullable=False)),
                        "flags as given, long names, value as a string ('true' for a bare flag)",
                    ),
                    "env": Field(
                        MapOf(Scalar("string", nullable=False)),
                        "allow-listed, redacted environment",
                    ),
                },
            ),
            "the serving engine's configuration",
        ),
        "training": Field(TRAINING, "a training job's parallel layout and its schedule's bubble"),
        "load": Field(
            Struct(
                "load",
                {
                    "known": _s("bool", "true when running or queued is known", False),
                    "running": _s("double", "mean running requests, or null"),
                    "queued": _s("double", "mean queued requests, or null"),
                },
            ),
            "engine load over the window",
        ),
        "hardware": Field(
            Struct(
                "hardware",
                {
                    "gpu_model": _s("string", "model name of the GPUs, or null"),
                    "gpu_count": _s("int", "GPUs analysed", nullable=False),
                    "power_limit_w": _s("double", "lowest power limit among the GPUs, or null"),
                    "interconnect": _s(
                        "string", "link between stages: 'pcie', 'nvlink', or null if unknown"
                    ),
                },
            ),
            "the hardware",
        ),
        "topology": Field(
            Struct(
                "topology",
                {
                    "known": _s("bool", "true when a stage -> GPU map is known", False),
                    "source": _s("string", "where it came from ('engine', 'static', ...)"),
                    "pp_size": _s("int", "stages"),
                    "tp_size": _s("int", "GPUs per stage"),
                },
            ),
            "the pipeline topology",
        ),
        "derived": Field(
            Struct(
                "derived",
                {
                    "fill_gain_ratio": _s(
                        "double",
                        "throughput factor if the pipeline were filled: "
                        "min(pp_size, max(running, 1)) / concurrency; null if unknown",
                    ),
                    "requests_per_micro_batch": _s(
                        "double",
                        "running requests per micro-batch in flight: "
                        "evidence.micro_batch_requests where the engine counts one micro-batch, "
                        "else load.running / max(evidence.concurrency, 1); about load.running "
                        "when all share one",
                    ),
                    "micro_batch_cap_suggested": _s(
                        "int",
                        "the per-slot cap that spreads the running requests over pp_size "
                        "slots: max(ceil(load.running / pp_size), 1); null if unknown",
                    ),
                    "layer_partition_suggested": _s(
                        "string",
                        "comma-separated layers per stage balancing the measured stage "
                        "times; null unless the layer count is known",
                    ),
                    "stage_time_shares": _s(
                        "string", "comma-separated percent of summed stage time, per stage"
                    ),
                    "micro_batches_allowed": _s(
                        "double",
                        "micro-batches the settings let be in flight: the engine's pp_size "
                        "(a serving pipeline cannot use more), else min(m, p) of a given "
                        "training schedule; null if unknown",
                    ),
                    "in_flight_ratio": _s(
                        "double",
                        "evidence.micro_batches_in_flight / micro_batches_allowed: 1 when the "
                        "pipeline is as full as its settings allow; null if unknown",
                    ),
                },
            ),
            "figures computed from the facts above",
        ),
        "held_s": Field(
            MapOf(Scalar("double", nullable=False)),
            "seconds each rule's condition has held, by rule name",
        ),
        "params": Field(
            MapOf(Scalar("string", nullable=False)),
            "constants from the rule file's `params:` (names are checked per file)",
        ),
    },
)


def lookup(path: tuple[str, ...]) -> FieldType | None:
    """The type at a dotted path from the root, or None if no such field."""
    t: FieldType = SCHEMA
    for part in path:
        if not isinstance(t, Struct) or part not in t.fields:
            return None
        t = t.fields[part].type
    return t


def facts_markdown() -> str:
    """Reference of every fact, as Markdown (docs/facts.md is this text)."""
    lines = [
        "# Facts: what rules see",
        "",
        f"Facts schema version {FACTS_VERSION}. Generated by `bubblewatch rules facts`;",
        "`tests/rules` checks that this file matches the code.",
        "",
        "Rules reference facts by path from these roots, in expressions",
        "(`engine.pp_size`) and templates (`{{ engine.pp_size }}`). A type ending",
        "in `?` may be `null` (unknown): guard it (`x != null && x < 2`), since",
        "comparing `null` with a number is an evaluation error, and a rule whose",
        "expression errors does not fire (the error is reported). Unknown names",
        "are rejected when the rule file is loaded. `x == null` is simply false for a",
        "known `x`. Numbers are `int` or `double` as listed: comparisons mix them",
        "freely, arithmetic does not (write `double(engine.pp_size) * 0.5`).",
        "",
        "For one-shot analysis (`bubblewatch analyze`) the analysed window's length",
        "counts as the time every condition has held; the daemon tracks it per rule.",
        "",
    ]
    for name, f in SCHEMA.fields.items():
        lines.append(f"## `{name}`: {f.type.describe()}")
        lines.append("")
        lines.append(f.doc[0].upper() + f.doc[1:] + ".")
        lines.append("")
        _struct_table(f.type, name, lines)
    return "\n".join(lines).rstrip() + "\n"


def _struct_table(t: FieldType, prefix: str, lines: list[str]) -> None:
    inner = t.elem if isinstance(t, ListOf) else t
    if not isinstance(inner, Struct):
        return
    prefix = f"{prefix}[i]" if isinstance(t, ListOf) else prefix
    lines.append("| path | type | meaning |")
    lines.append("|---|---|---|")
    nested: list[tuple[str, FieldType]] = []
    for k, sub in inner.fields.items():
        lines.append(f"| `{prefix}.{k}` | `{sub.type.describe()}` | {sub.doc} |")
        sub_inner = sub.type.elem if isinstance(sub.type, ListOf) else sub.type
        if isinstance(sub_inner, Struct):
            nested.append((f"{prefix}.{k}", sub.type))
    lines.append("")
    for p, st in nested:
        _struct_table(st, p, lines)
