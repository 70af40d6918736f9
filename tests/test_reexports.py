"""No module hands on another's names: each name is imported from the module that defines it.

A package's face (`__init__.py`) may gather its package's names; a plain
module may not, neither in `__all__` nor for an importer that reaches through
it. Read from the source (AST), as tests/test_floors.py reads the imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from test_floors import ROOT, modules

CALLERS = ("bubblewatch/**/*.py", "tests/**/*.py", "benchmarks/*.py", "scripts/*.py")


def _bound(body: Iterable[ast.stmt], out: set[str]) -> set[str]:
    """Names a module's top level defines (functions, classes, assignments), imports aside."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try):
            for part in (node.body, node.orelse, getattr(node, "finalbody", [])):
                _bound(part, out)
            for handler in getattr(node, "handlers", []):
                _bound(handler.body, out)
    return out


def _exported(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            assert isinstance(node.value, ast.List | ast.Tuple)
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return []


def _defined() -> dict[str, set[str]]:
    """Plain module (no package face) -> the names it defines."""
    found = {}
    for name, (path, is_package) in modules(ROOT, "bubblewatch").items():
        if not is_package:
            found[name] = _bound(ast.parse(path.read_text(encoding="utf-8")).body, set())
    return found


def test_all_lists_only_what_the_module_defines() -> None:
    handed_on = []
    for name, (path, is_package) in modules(ROOT, "bubblewatch").items():
        if is_package:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _bound(tree.body, set())
        handed_on += [f"{name}: {n}" for n in _exported(tree) if n not in own]
    assert handed_on == []


def test_every_name_is_imported_from_where_it_is_defined() -> None:
    defined = _defined()
    through = []
    for pattern in CALLERS:
        for path in sorted(ROOT.glob(pattern)):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module in defined:
                    own = defined[node.module]
                    through += [
                        f"{path.relative_to(ROOT)}: {a.name} through {node.module}"
                        for a in node.names
                        if a.name not in own and f"{node.module}.{a.name}" not in defined
                    ]
    assert through == []


def test_the_check_sees_a_name_handed_on() -> None:
    """A synthetic module that imports a name and lists it in __all__ is caught."""
    tree = ast.parse("from a import x\n\ndef y(): ...\n\n__all__ = ['x', 'y']\n")
    own = _bound(tree.body, set())
    assert [n for n in _exported(tree) if n not in own] == ["x"]
