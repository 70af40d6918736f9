"""Rules as loaded: immutable records built by the loader from a rule file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bubblewatch.rules.expr import Expr
from bubblewatch.rules.template import Template

RULE_FILE_VERSION = 1


class Severity(str, Enum):
    """How urgent a recommendation is; ordered info < warning < critical."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


@dataclass(frozen=True)
class FixSpec:
    """A fix for one engine: flags to add or change, flags to drop, env to set, a note."""

    engine: str | None
    add_flags: tuple[tuple[str, Template | None], ...] = ()  # None: a bare flag
    remove_flags: tuple[str, ...] = ()
    set_env: tuple[tuple[str, Template], ...] = ()
    note: Template | None = None
    # Settings a running server takes without a restart (SGLang /set_internal_state).
    set_live: tuple[tuple[str, Template], ...] = ()


@dataclass(frozen=True)
class GainSpec:
    """Expected gain: a metric, a factor expression (a number) and/or a text template."""

    metric: str
    factor: Expr | None = None
    text: Template | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    group: str
    path: str
    line: int
    expr: Expr
    severity: Severity
    summary: Template
    for_s: float = 0.0
    engines: tuple[str, ...] = ()  # empty: any engine
    labels: Mapping[str, str] = field(default_factory=dict)
    description: Template | None = None
    fix: FixSpec | None = None
    gain: GainSpec | None = None
    rationale: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class RuleSet:
    """Rules in file order; `sources` are the files they came from."""

    rules: tuple[Rule, ...]
    sources: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rules)
