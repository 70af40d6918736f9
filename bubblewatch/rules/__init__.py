"""The rules engine: facts plus YAML rules (safe CEL expressions) to concrete recommendations.

`recommend()` is the one call a report needs; `load_rules`, `build_facts`,
`evaluate` and `render_fix` are the parts; `RuleEngine` holds a set that
reloads atomically. Rule authors: docs/rules.md; facts: docs/facts.md.
"""

from bubblewatch.rules.errors import EvalError, ExprError, FactsError, RuleError
from bubblewatch.rules.evaluate import (
    Evaluation,
    ExpectedGain,
    Recommendation,
    combined_fix,
    evaluate,
    evaluate_detailed,
    recommend,
)
from bubblewatch.rules.facts import Facts, build_facts, facts_from_mapping
from bubblewatch.rules.loader import check_paths, load_rules, shipped_rules_dir
from bubblewatch.rules.model import Rule, RuleSet, Severity
from bubblewatch.rules.render import Fix, RenderedFix, render_fix
from bubblewatch.rules.report import format_recommendations
from bubblewatch.rules.rule_engine import ReloadResult, RuleEngine

__all__ = [
    "EvalError",
    "Evaluation",
    "ExpectedGain",
    "ExprError",
    "Facts",
    "FactsError",
    "Fix",
    "Recommendation",
    "ReloadResult",
    "RenderedFix",
    "Rule",
    "RuleEngine",
    "RuleError",
    "RuleSet",
    "Severity",
    "build_facts",
    "check_paths",
    "combined_fix",
    "evaluate",
    "evaluate_detailed",
    "facts_from_mapping",
    "format_recommendations",
    "load_rules",
    "recommend",
    "render_fix",
    "shipped_rules_dir",
]
