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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
import lark
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import Activation, CELEvalError, CELUnsupportedError, Evaluator

from bubblewatch.rules.errors import EvalError, ExprError
from bubblewatch.rules.schema import SCHEMA, FieldType, ListOf, MapOf, Scalar, Struct

MAX_EXPR_CHARS = 1000
MAX_NESTING = 12
MAX_TREE_DEPTH = 160
MAX_TREE_NODES = 4000
MAX_MACRO_NESTING = 2
MAX_STEPS = 20_000

MACROS = frozenset({"exists", "all", "exists_one", "map", "filter"})
FUNCTIONS = frozenset(
    {
        "size",
        "int",
        "uint",
        "double",
        "string",
        "bool",
        "has",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
    }
)
METHODS = frozenset({"size", "contains", "startsWith", "endsWith", "matches"})

logging.getLogger("celpy").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Expr:
    """A checked expression, ready to evaluate against facts."""

    source: str
    tree: lark.Tree[Any] = field(repr=False, compare=False)

    def evaluate(self, activation: Mapping[str, Any], *, max_steps: int = MAX_STEPS) -> Any:
        """Evaluate against CEL values (see `to_activation`); EvalError on failure or budget."""
        ev = _BoundedEvaluator(self.tree, Activation(functions=_OPERATORS), _Budget(max_steps))
        try:
            value = ev.evaluate(dict(activation))
        except _OutOfSteps:
            raise EvalError(f"evaluation exceeded {max_steps} steps") from None
        except (CELEvalError, CELUnsupportedError) as e:
            raise EvalError(_cel_message(e)) from None
        except (RecursionError, MemoryError, OverflowError) as e:
            raise EvalError(f"evaluation aborted: {type(e).__name__}") from None
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as e:
            raise EvalError(f"{type(e).__name__}: {e}") from None
        return _to_python(value)


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
    depth = _bracket_depth(source)
    if depth > MAX_NESTING:
        raise ExprError(f"expression nests brackets {depth} deep, the limit is {MAX_NESTING}")
    try:
        tree = celpy.Environment().compile(source)
    except CELParseError as e:
        msg = str(e.args[0]) if e.args else "syntax error"
        first = msg.strip().splitlines()[0] if msg.strip() else "syntax error"
        where = f" at column {e.column}" if e.column is not None else ""
        raise ExprError(f"syntax error{where}: {first}") from None
    except (RecursionError, lark.exceptions.LarkError) as e:
        raise ExprError(f"syntax error: {type(e).__name__}") from None
    _check_size(tree)
    _Checker(params or {}).infer(tree, {}, 0)
    return Expr(source, tree)


def _bracket_depth(src: str) -> int:
    """Deepest bracket nesting outside string literals (a cheap guard before parsing)."""
    depth = best = 0
    quote = ""
    escaped = False
    for ch in src:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    return best


def _check_size(tree: lark.Tree[Any]) -> None:
    stack: list[tuple[lark.Tree[Any], int]] = [(tree, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_TREE_DEPTH:
            raise ExprError(
                f"expression is too deeply nested (parse depth over {MAX_TREE_DEPTH}); "
                "split long chains of operators"
            )
        if nodes > MAX_TREE_NODES:
            raise ExprError(f"expression is too large (over {MAX_TREE_NODES} parse nodes)")
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))


_DYN = None  # a value whose type the checker does not track (literals, function results)


class _Checker:
    """Walks the parse tree against the schema: names, fields, functions, macro nesting."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params

    def infer(self, t: Any, scope: dict[str, FieldType | None], macros: int) -> FieldType | None:
        if not isinstance(t, lark.Tree):
            return _DYN
        kind = t.data
        ch = t.children
        if kind == "ident":
            return self._ident(str(ch[0]), scope)
        if kind == "member_dot":
            return self._field(self.infer(ch[0], scope, macros), str(ch[1]), ch[0], scope)
        if kind == "member_dot_arg":
            return self._method(ch, scope, macros)
        if kind == "member_index":
            base = self.infer(ch[0], scope, macros)
            self.infer(ch[1], scope, macros)
            if isinstance(base, ListOf):
                return base.elem
            if isinstance(base, MapOf):
                return base.value
            if isinstance(base, (Struct, Scalar)):
                raise ExprError(f"cannot index {base.describe()} with [...]; use a field name")
            return _DYN
        if kind == "ident_arg":
            name = str(ch[0])
            if name not in FUNCTIONS:
                raise ExprError(
                    f"unknown function {name!r} (allowed: {', '.join(sorted(FUNCTIONS))})"
                )
            args = _args(ch[1])
            if name == "has" and (len(args) != 1 or _path_node(args[0]) is None):
                raise ExprError("has() takes one field path, e.g. has(engine.version)")
            for a in args:
                self.infer(a, scope, macros)
            return _DYN
        if kind in ("dot_ident", "dot_ident_arg", "member_object"):
            raise ExprError("message construction and leading-dot names are not allowed")
        last: FieldType | None = _DYN
        for c in ch:
            last = self.infer(c, scope, macros)
        # Wrapper nodes (expr, member, primary, ...) with one child pass its type through.
        return last if len(ch) == 1 else _DYN

    def _ident(self, name: str, scope: dict[str, FieldType | None]) -> FieldType | None:
        if name in scope:
            return scope[name]
        if name in SCHEMA.fields:
            return SCHEMA.fields[name].type
        raise ExprError(
            f"unknown name {name!r}: facts are {', '.join(SCHEMA.fields)} (see docs/facts.md)"
        )

    def _field(
        self, base: FieldType | None, name: str, base_node: Any, scope: Any
    ) -> FieldType | None:
        if base is SCHEMA.fields["params"].type and _root_name(base_node) == "params":
            if name not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise ExprError(f"unknown parameter 'params.{name}' (this file defines: {known})")
            return _DYN
        if name.startswith("__"):
            raise ExprError(f"field {name!r} is not allowed")
        if isinstance(base, Struct):
            if name not in base.fields:
                raise ExprError(
                    f"unknown fact {_dotted(base_node)}.{name}: "
                    f"{base.name} has {', '.join(base.fields)}"
                )
            return base.fields[name].type
        if isinstance(base, MapOf):
            raise ExprError(
                f"{_dotted(base_node)} is a map with arbitrary keys: "
                f'write {_dotted(base_node)}["{name}"] or "{name}" in {_dotted(base_node)}'
            )
        if isinstance(base, (ListOf, Scalar)):
            raise ExprError(f"{_dotted(base_node)} is {base.describe()} and has no field {name!r}")
        return _DYN

    def _method(
        self, ch: list[Any], scope: dict[str, FieldType | None], macros: int
    ) -> FieldType | None:
        base = self.infer(ch[0], scope, macros)
        name = str(ch[1])
        args = _args(ch[2] if len(ch) > 2 else None)
        if name in MACROS:
            if macros >= MAX_MACRO_NESTING:
                raise ExprError(f"macros nest more than {MAX_MACRO_NESTING} deep")
            if len(args) != 2:
                raise ExprError(
                    f"{name}() takes a variable and an expression, e.g. {name}(s, s.stage > 0)"
                )
            var = _path_node(args[0])
            if var is None or len(var) != 1:
                raise ExprError(f"{name}(): the first argument must be a variable name")
            if var[0] in SCHEMA.fields:
                raise ExprError(f"{name}(): variable {var[0]!r} would hide the fact of that name")
            elem: FieldType | None = _DYN
            if isinstance(base, ListOf):
                elem = base.elem
            elif isinstance(base, MapOf):
                elem = Scalar("string", nullable=False)
            elif isinstance(base, (Struct, Scalar)):
                raise ExprError(f"{name}() needs a list or map, not {base.describe()}")
            self.infer(args[1], {**scope, var[0]: elem}, macros + 1)
            return ListOf(elem) if name == "filter" and elem is not None else _DYN
        if name not in METHODS:
            raise ExprError(
                f"unknown method {name!r} (allowed: {', '.join(sorted(METHODS | MACROS))})"
            )
        for a in args:
            self.infer(a, scope, macros)
        return _DYN


def _args(exprlist: Any) -> list[Any]:
    return list(exprlist.children) if isinstance(exprlist, lark.Tree) else []


def _unwrap(t: Any) -> Any:
    while isinstance(t, lark.Tree) and len(t.children) == 1 and t.data not in ("ident", "literal"):
        t = t.children[0]
    return t


def _path_node(t: Any) -> tuple[str, ...] | None:
    """`a.b.c` as ('a', 'b', 'c') when the node is a plain dotted path, else None."""
    t = _unwrap(t)
    if isinstance(t, lark.Tree) and t.data == "ident":
        return (str(t.children[0]),)
    if isinstance(t, lark.Tree) and t.data == "member_dot":
        head = _path_node(t.children[0])
        return None if head is None else (*head, str(t.children[1]))
    return None


def _dotted(t: Any) -> str:
    p = _path_node(t)
    return ".".join(p) if p else "(expression)"


def _root_name(t: Any) -> str | None:
    p = _path_node(t)
    return p[0] if p else None


def _num_pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Heterogeneous numeric comparison as current CEL specifies: int vs double as doubles."""
    ints = (celpy.celtypes.IntType, celpy.celtypes.UintType)
    dbl = celpy.celtypes.DoubleType
    if isinstance(a, ints) and isinstance(b, dbl):
        return dbl(float(a)), b
    if isinstance(a, dbl) and isinstance(b, ints):
        return a, dbl(float(b))
    return a, b


def _compare(name: str) -> Any:
    base = celpy.evaluation.base_functions[name]

    def op(a: Any, b: Any) -> Any:
        if a is None or b is None:
            if name == "_==_":
                return celpy.celtypes.BoolType(a is None and b is None)
            if name == "_!=_":
                return celpy.celtypes.BoolType(not (a is None and b is None))
        return base(*_num_pair(a, b))

    return op


# `x == null` is false (not an error) for a known x, and ints compare with doubles.
_OPERATORS = {n: _compare(n) for n in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_")}


class _OutOfSteps(Exception):
    pass


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _OutOfSteps


class _BoundedEvaluator(Evaluator):
    """celpy's tree-walking evaluator, spending one step per visited node (macros share it)."""

    def __init__(self, ast: lark.Tree[Any], activation: Activation, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self._budget = budget

    def _visit_tree(self, tree: lark.Tree[Any]) -> Any:
        # lark routes `visit` and `visit_children` through here: one step per node.
        self._budget.spend()
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _BoundedEvaluator(ast, self.activation, self._budget)


def _cel_message(e: Exception) -> str:
    raw = e.args[0] if e.args else str(e)
    msg = str(raw)
    if "no matching overload" in msg:
        return (
            "no operator for these operand types (null in arithmetic or an ordering, "
            "or int mixed with double in arithmetic: use double(...))"
        )
    if "no such member" in msg or "no such key" in msg:
        return f"missing value: {msg}"
    return msg if len(msg) <= 200 else msg[:197] + "..."


def _to_python(v: Any) -> Any:
    """CEL values back to plain Python (bool, int, float, str, None, list, dict)."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, celpy.celtypes.BoolType):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, Mapping):
        return {_to_python(k): _to_python(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_python(x) for x in v]
    return str(v)
