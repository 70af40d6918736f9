"""Safe expressions: CEL (via `celpy`) checked against the facts schema, run with a step budget.

CEL has no loops, assignments, imports or I/O; this adapter narrows it further:

- size: at most `MAX_EXPR_CHARS` characters, bracket nesting `MAX_NESTING`,
  parse-tree depth `MAX_TREE_DEPTH` and `MAX_TREE_NODES` nodes (so neither the
  parser nor the evaluator can recurse without bound);
- names: every identifier and field path must exist in the facts schema (or be
  a variable bound by a macro, or a `params.` name of the rule file); unknown
  names are an error when the rule file loads, not a silent false;
- functions: only the list in `FUNCTIONS` and the macros in `MACROS`; no
  protobuf message construction, no leading-dot names;
- macros (`exists`, `all`, `map`, ...) nest at most `MAX_MACRO_NESTING` deep;
- evaluation: every visited node spends one step of `MAX_STEPS`; running out
  is an `EvalError`, never a hang. Values are plain data (maps, lists,
  scalars): there are no Python objects to reach into.

The library's `InterpretedRunner` is a tree walker; the transpiling runner
(which compiles Python source) is never used.

This module is the public face: `compile_expr` parses and checks (the checks
live in `_expr_check`), `Expr.evaluate` runs (in `_expr_run`).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
import lark
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError

from bubblewatch.rules._cache import install_cel_parser
from bubblewatch.rules._expr_check import (
    MAX_EXPR_CHARS,
    MAX_NESTING,
    Checker,
    bracket_depth,
    check_size,
)
from bubblewatch.rules._expr_run import MAX_STEPS, run
from bubblewatch.rules.errors import ExprError

__all__ = ["Expr", "compile_expr", "to_activation"]

logging.getLogger("celpy").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Expr:
    """A checked expression, ready to evaluate against facts.

    Pickled (the rules cache, rules._cache), its parse tree travels as bytes of
    its own and is rebuilt on first use: CEL's trees are deep (some 26 KB an
    expression), and a run evaluates a few of a set's expressions and renders
    the templates of the rules that fire only (BENCHMARKS.md, "The last pieces").
    """

    source: str
    tree: lark.Tree[Any] = field(repr=False, compare=False)

    def evaluate(self, activation: Mapping[str, Any], *, max_steps: int = MAX_STEPS) -> Any:
        """Evaluate against CEL values (see `to_activation`); EvalError on failure or budget."""
        return run(self.tree, activation, max_steps=max_steps)

    def __getattr__(self, name: str) -> Any:
        # Only reached when `tree` is not set yet: an Expr read back by _packed.
        packed = self.__dict__.get("_packed")
        if name != "tree" or packed is None:
            raise AttributeError(name)
        tree = pickle.loads(packed)  # bytes the rules cache wrote (rules._cache: a private file)
        object.__setattr__(self, "tree", tree)
        return tree

    def __reduce__(self) -> tuple[Any, ...]:
        packed = self.__dict__.get("_packed")
        if packed is None:
            packed = pickle.dumps(self.tree, protocol=pickle.HIGHEST_PROTOCOL)
        return (_packed, (self.source, packed))


def _packed(source: str, packed: bytes) -> Expr:
    """An Expr whose tree is unpickled from `packed` when first used (Expr.__getattr__)."""
    expr = Expr.__new__(Expr)
    object.__setattr__(expr, "source", source)
    object.__setattr__(expr, "_packed", packed)
    return expr


def to_activation(data: Mapping[str, Any]) -> dict[str, Any]:
    """Plain facts (JSON-like) to CEL values, once per evaluation round."""
    return {k: json_to_cel(v) for k, v in data.items()}


def compile_expr(source: str, *, params: Mapping[str, Any] | None = None) -> Expr:
    """Parse and check one expression; ExprError says what is wrong and where in the text."""
    if not isinstance(source, str):
        raise ExprError(f"expression must be a string, got {type(source).__name__}")
    if not source.strip():
        raise ExprError("expression is empty")
    if len(source) > MAX_EXPR_CHARS:
        raise ExprError(f"expression is {len(source)} characters, the limit is {MAX_EXPR_CHARS}")
    depth = bracket_depth(source)
    if depth > MAX_NESTING:
        raise ExprError(f"expression nests brackets {depth} deep, the limit is {MAX_NESTING}")
    install_cel_parser()
    try:
        tree = celpy.Environment().compile(source)
    except CELParseError as e:
        msg = str(e.args[0]) if e.args else "syntax error"
        first = msg.strip().splitlines()[0] if msg.strip() else "syntax error"
        where = f" at column {e.column}" if e.column is not None else ""
        raise ExprError(f"syntax error{where}: {first}") from None
    except (RecursionError, lark.exceptions.LarkError) as e:
        raise ExprError(f"syntax error: {type(e).__name__}") from None
    check_size(tree)
    Checker(params or {}).infer(tree, {}, 0)
    return Expr(source, tree)
