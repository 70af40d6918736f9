"""The rule set in force, swapped atomically on reload."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bubblewatch.rules.errors import RuleError
from bubblewatch.rules.evaluate import Recommendation, evaluate
from bubblewatch.rules.facts import Facts
from bubblewatch.rules.loader import load_rules
from bubblewatch.rules.model import RuleSet


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    rules: int
    error: str | None = None


class RuleEngine:
    """Holds one RuleSet; `reload` replaces it only when the new set loads completely."""

    def __init__(self, rules: RuleSet | None = None) -> None:
        self._rules = rules if rules is not None else RuleSet(())
        self._lock = threading.Lock()

    @property
    def rules(self) -> RuleSet:
        return self._rules

    def reload(self, paths: Sequence[str | Path] | None = None) -> ReloadResult:
        """Load `paths` (None: the shipped set); on any error the previous set stays in force."""
        with self._lock:
            try:
                new = load_rules(paths)
            except RuleError as e:
                return ReloadResult(False, len(self._rules), str(e))
            self._rules = new  # one reference assignment: readers see old or new, never a mix
            return ReloadResult(True, len(new))

    def evaluate(
        self, facts: Facts, *, held_s: Mapping[str, float] | None = None
    ) -> list[Recommendation]:
        return evaluate(self._rules, facts, held_s=held_s)
