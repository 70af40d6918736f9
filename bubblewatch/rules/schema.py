"""The facts schema: every name a rule may use, with its type and meaning.

The schema is data. The expression checker walks expressions against it (an
unknown name is a load-time error), `build_facts` coerces values to it, rule
tests validate the facts they give against it, and `docs/facts.md` is
generated from it (`bubblewatch rules facts`), so the four cannot drift apart. The types are in
_schema_types, the records the root is made of in _schema_parts.
"""

from __future__ import annotations

from bubblewatch.detect.types import EVIDENCE_KEYS
from bubblewatch.rules._schema_parts import (
    DERIVED,
    ENGINE,
    EVIDENCE_TYPES,
    FINDING,
    GPU,
    PROCESS,
    STAGE,
    TRAINING,
)
from bubblewatch.rules._schema_types import (
    Field,
    FieldType,
    ListOf,
    Struct,
    list_of,
    map_of,
    scalar,
    struct,
)

__all__ = ["FACTS_VERSION", "SCALAR_KINDS", "SCHEMA", "facts_markdown"]

FACTS_VERSION = 1

SCALAR_KINDS = ("bool", "int", "double", "string")


SCHEMA = Struct(
    "facts",
    {
        "version": scalar("int", "facts schema version (1)", nullable=False),
        "diagnosis": struct(
            "diagnosis",
            {
                "verdict": scalar("string", "primary verdict (a Verdict value)", nullable=False),
                "confidence": scalar("double", "confidence of the primary verdict", False),
                "verdicts": list_of("string", "verdicts of all findings, primary first"),
                "confidences": map_of(
                    "double", "confidence by verdict, for every finding (`'launch_bound' in ...`)"
                ),
                "load_limited": scalar(
                    "bool", "serialized only: true when too little work to fill the pipeline"
                ),
                "window_s": scalar("double", "length of the analysed window", nullable=False),
                "n_samples": scalar("int", "samples in the window", nullable=False),
                "findings": Field(ListOf(FINDING), "all findings, primary first"),
            },
            "the detector's diagnosis",
        ),
        "evidence": struct(
            "evidence",
            {k: Field(EVIDENCE_TYPES[k], doc) for k, doc in EVIDENCE_KEYS.items()},
            "the detector's evidence keys (null when not measurable)",
        ),
        "stages": Field(ListOf(STAGE), "per-stage figures, in pipeline order"),
        "gpus": Field(ListOf(GPU), "GPUs analysed, with identity"),
        "engine": Field(ENGINE, "the serving engine's configuration"),
        "training": Field(TRAINING, "a training job's parallel layout and its schedule's bubble"),
        "process": Field(PROCESS, "one process holding several GPUs, where no engine is known"),
        "load": struct(
            "load",
            {
                "known": scalar("bool", "true when running or queued is known", False),
                "running": scalar("double", "mean running requests, or null"),
                "queued": scalar("double", "mean queued requests, or null"),
                "peak": scalar(
                    "double",
                    "p95 of running + queued requests over the load history the analysis "
                    "has (a recording's load records, Prometheus history, the daemon's "
                    "windows of the last day), or null",
                ),
                "peak_span_s": scalar("double", "seconds of load history the peak covers"),
                "peak_source": scalar(
                    "string", "where the peak came from: 'recording', 'daemon', or null"
                ),
            },
            "engine load over the window",
        ),
        "hardware": struct(
            "hardware",
            {
                "gpu_model": scalar("string", "model name of the GPUs, or null"),
                "gpu_count": scalar("int", "GPUs analysed", nullable=False),
                "power_limit_w": scalar("double", "lowest power limit among the GPUs, or null"),
                "interconnect": scalar(
                    "string", "link between stages: 'pcie', 'nvlink', or null if unknown"
                ),
            },
            "the hardware",
        ),
        "topology": struct(
            "topology",
            {
                "known": scalar("bool", "true when a stage -> GPU map is known", False),
                "source": scalar("string", "where it came from ('engine', 'static', ...)"),
                "pp_size": scalar("int", "stages"),
                "tp_size": scalar("int", "GPUs per stage"),
            },
            "the pipeline topology",
        ),
        "derived": Field(DERIVED, "figures computed from the facts above"),
        "held_s": map_of("double", "seconds each rule's condition has held, by rule name"),
        "params": map_of(
            "string", "constants from the rule file's `params:` (names are checked per file)"
        ),
    },
)


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
