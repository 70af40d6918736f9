"""Errors of the rules engine, each naming where: file, line, rule, field.

BubblewatchError (bubblewatch.errors)
├── InputError
│   └── RuleError    a rule file or rule test that is wrong (schema, expression, template)
├── ExprError        an expression that does not parse, names an unknown fact, or is too big
├── FactsError       facts that do not fit the schema (a ValueError; rule tests wrap it)
└── EvalError        an expression that failed or ran out of budget while evaluating
"""

from __future__ import annotations

from bubblewatch.errors import BubblewatchError, InputError


class RuleError(InputError):
    """A rule file or rule test that is wrong; the message names file, line and rule."""

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        line: int | None = None,
        field: str | None = None,
        rule: str | None = None,
    ) -> None:
        self.rule = rule
        super().__init__(
            f"rule {rule!r}: {message}" if rule else message, path=path, line=line, field=field
        )


class ExprError(BubblewatchError, ValueError):
    """An expression or template rejected before it ever runs (syntax, unknown fact, size)."""


class EvalError(BubblewatchError, ValueError):
    """An expression that failed while evaluating (type mismatch, null, step budget)."""


class FactsError(BubblewatchError, ValueError):
    """Facts that do not fit the schema; the message names the path."""
