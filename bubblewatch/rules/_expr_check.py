"""Check a parsed expression before it ever runs: its size, and every name against the schema.

Size: the limits on characters and bracket nesting (applied before parsing)
and on parse-tree depth and node count (after). Names: every identifier and
field path must exist in the facts schema (bubblewatch.rules.schema), be a
variable bound by a macro, or a `params.` name of the rule file; only the
functions, methods and macros listed here may be called. Each breach is an
`ExprError` that says what and where.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lark

from bubblewatch.rules._schema_types import FieldType, ListOf, MapOf, Scalar, Struct
from bubblewatch.rules.errors import ExprError
from bubblewatch.rules.schema import SCHEMA

MAX_EXPR_CHARS = 1000
MAX_NESTING = 12
MAX_TREE_DEPTH = 160
MAX_TREE_NODES = 4000
MAX_MACRO_NESTING = 2
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


def bracket_depth(src: str) -> int:
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


def check_size(tree: lark.Tree[Any]) -> None:
    """Bound the parse tree's depth and size before anything recurses over it."""
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


class Checker:
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
