"""The vLLM fixes bubblewatch renders, as engine start-ups to try on the real engine.

Each vLLM rule's fix in rules/bubblewatch.rules.yaml, spelled for this engine
(PP 2, 4 layers, the loads driven); `rendered()` adds whatever `analyze`
recommended on the real engine's stand-in telemetry, so a fix rendered there
is always started too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Fix:
    name: str
    rule: str
    args: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)  # flags dropped with their value
    env: dict[str, str] = field(default_factory=dict)
    # Why the rule cannot render this fix on this engine, if it cannot: then its throughput
    # is measured and reported, not held to the safety bound (advice never given here).
    not_rendered_here: str | None = None

    def describe(self) -> str:
        parts = [f"+ {' '.join(self.args)}"] if self.args else []
        parts += [f"- {f}" for f in self.remove]
        parts += [f"{k}={v}" for k, v in self.env.items()]
        return f"{'; '.join(parts)}  ({self.rule})"

    def apply(self, argv: Sequence[str]) -> list[str]:
        out: list[str] = []
        skip = False
        for a in argv:
            if skip:
                skip = False
                continue
            if a in self.remove:
                skip = True
                continue
            out.append(a)
        return out + self.args


FIXES = (
    # MaxNumSeqsLimitsLoad: --max-num-seqs sized for the peak (here twice the largest load).
    Fix("max-num-seqs", "MaxNumSeqsLimitsLoad", args=["--max-num-seqs", "32"]),
    # PipelineOverPcieLatencyBoundVLLM: the same two devices as TP instead of PP.
    Fix(
        "tp-instead-of-pp",
        "PipelineOverPcieLatencyBoundVLLM",
        args=["--tensor-parallel-size", "2"],
        remove=["--pipeline-parallel-size"],
        not_rendered_here="its rule needs GPUs over PCIe (hardware.interconnect == pcie); "
        "the CPU ranks share memory",
    ),
    # StageImbalanceVLLM as `analyze` renders it on this engine's own stand-in telemetry once
    # told the current partition (2,2): stage 1 at 1.42x the mean (logits and sampling run
    # on the last rank), so one layer moves to stage 0.
    Fix(
        "layer-partition-rendered",
        "StageImbalanceVLLM",
        env={"VLLM_PP_LAYER_PARTITION": "3,1"},
    ),
)


def select(spec: str) -> list[Fix]:
    if spec == "all":
        return list(FIXES)
    if spec == "none":
        return []
    names = {f.name: f for f in FIXES}
    unknown = [n for n in spec.split(",") if n not in names]
    if unknown:
        raise ValueError(f"unknown fix(es) {unknown}; known: {sorted(names)}, all, none")
    return [names[n] for n in spec.split(",")]


def rendered(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The recommendations with a fix that `analyze` gave at any load (name and fix)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        for rec in row.get("recommendations") or []:
            fix = rec.get("fix") or {}
            if fix and rec not in out:
                out.append({"load": row.get("concurrency"), "rule": rec.get("rule"), "fix": fix})
    return out


def from_rendered(rendered_fixes: list[dict[str, Any]]) -> list[Fix]:
    """Each fix `analyze` rendered on the real engine that changes its start (flags, env)."""
    out: list[Fix] = []
    for i, item in enumerate(rendered_fixes):
        fix = item.get("fix") or {}
        add = fix.get("add_flags") or {}
        args = [str(x) for k, v in add.items() for x in ((k,) if v is None else (k, v))]
        remove = [str(f) for f in fix.get("remove_flags") or []]
        env = {str(k): str(v) for k, v in (fix.get("set_env") or {}).items()}
        if args or remove or env:
            rule = str(item.get("rule"))
            out.append(Fix(f"rendered-{i}-{rule}", rule, args, remove, env))
    return out


def to_try(chosen: list[Fix], rendered_fixes: list[dict[str, Any]]) -> list[Fix]:
    """The chosen fixes, then every rendered one that none of them already starts."""
    out = list(chosen)
    for fix in from_rendered(rendered_fixes):
        if not any((f.args, f.remove, f.env) == (fix.args, fix.remove, fix.env) for f in out):
            out.append(fix)
    return out
