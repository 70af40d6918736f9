"""The floors of the house: each module imports only from its own floor or below, with no circle.

The floors follow the data flow (docs/architecture.md): the ground floor
(the model and the root helpers), the engines' knowledge, the readers of the
world (topology, sources, then the simulated world), detect, rules, sinks,
the one analysis path, the daemon and the command line. Every import counts:
at the top of a module, inside a function, under `if TYPE_CHECKING:`. A small
AST walk rather than import-linter: it needs no new dependency, reads the
imports inside functions the same way, and says in one line which file
imports what. Dynamic imports (`importlib.import_module`) are not followed:
the CLI's table names its own subcommand modules only.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Ground up; a module may import from its own floor and the floors below.
FLOORS: tuple[tuple[str, ...], ...] = (
    (  # 1: pure data, names, formulas
        "bubblewatch",
        "bubblewatch.errors",
        "bubblewatch.durations",
        "bubblewatch.limits",
        "bubblewatch.safeyaml",
        "bubblewatch.http_client",
        "bubblewatch.name_lookup",
        "bubblewatch.outputs",
        "bubblewatch.model",
    ),
    ("bubblewatch.engines",),  # 2: each serving engine's knowledge
    ("bubblewatch.topology",),  # 3a: who is who: processes, command lines, GPU map
    ("bubblewatch.sources",),  # 3b: readers of telemetry (they may ask topology for endpoints)
    ("bubblewatch.sim",),  # 3c: the simulated world (it writes the trace format sources read)
    ("bubblewatch.detect",),  # 4
    ("bubblewatch.rules",),  # 5
    ("bubblewatch.sinks",),  # 6
    ("bubblewatch.analysis",),  # 7
    ("bubblewatch.daemon",),  # 8a
    ("bubblewatch.cli", "bubblewatch.__main__"),  # 8b
)

# Arrows that lie in another engineer's area, named and temporary: each is
# removed from the check while it exists, and the last test fails once it is gone,
# so the list only shrinks.
TEMPORARY: Mapping[tuple[str, str], str] = {}


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__) for every .py file under root/package."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _targets(
    node: ast.Import | ast.ImportFrom, name: str, is_package: bool, mods: Mapping[str, object]
) -> Iterable[str]:
    """The package's modules one import statement loads (a package's face for its names)."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1
        here = name.split(".") if is_package else name.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    for alias in node.names:  # `from pkg import module` is an arrow to the module
        sub = f"{base}.{alias.name}"
        yield sub if sub in mods else base


def imports(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, wherever in the file the import stands."""
    mods = modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in mods.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                out.update(_targets(node, name, is_package, mods))
        graph[name] = {t for t in out if t in mods and t != name}
    return graph


def floor_of(module: str, floors: tuple[tuple[str, ...], ...]) -> int | None:
    """The floor of the longest name in FLOORS that is `module` or a package above it.

    A top-level name (the root package) stands for its own `__init__.py` only:
    each of its sub-packages and modules needs a floor of its own.
    """
    best: tuple[int, int] | None = None
    for i, names in enumerate(floors):
        for prefix in names:
            inside = "." in prefix and module.startswith(prefix + ".")
            if (module == prefix or inside) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return None if best is None else best[1]


def violations(
    graph: Mapping[str, set[str]],
    floors: tuple[tuple[str, ...], ...],
    allowed: Iterable[tuple[str, str]] = (),
) -> list[str]:
    """Every module without a floor, every arrow back up, every circle, in words."""
    skip = set(allowed)
    edges = {a: {b for b in bs if (a, b) not in skip} for a, bs in graph.items()}
    problems = [
        f"{m}: on no floor (add it to FLOORS)" for m in edges if floor_of(m, floors) is None
    ]
    for a, bs in sorted(edges.items()):
        fa = floor_of(a, floors)
        for b in sorted(bs):
            fb = floor_of(b, floors)
            if fa is not None and fb is not None and fb > fa:
                problems.append(f"{a} (floor {fa + 1}) imports {b} (floor {fb + 1}): back up")
    problems += [f"circle: {' -> '.join(c)}" for c in circles(edges)]
    return problems


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules, each as a loop of arrows."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package's graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                on_stack.discard(w)
                group.append(w)
            on_stack.discard(v)
            if group:
                groups.append(_loop(v, {v, *group}, edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def _loop(start: str, group: set[str], edges: Mapping[str, set[str]]) -> list[str]:
    """One loop through `start` inside its group: the shortest way back (breadth first)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & group):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no loop through {start}")  # a strongly connected group has one


def test_the_package_keeps_its_floors() -> None:
    graph = imports(ROOT, "bubblewatch")
    assert len(graph) > 200  # the walk read the package
    assert violations(graph, FLOORS, TEMPORARY) == []


def test_the_temporary_exceptions_are_still_needed() -> None:
    """An exception whose arrow is gone must leave the list."""
    graph = imports(ROOT, "bubblewatch")
    assert [pair for pair in TEMPORARY if pair[1] not in graph.get(pair[0], set())] == []


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


_TOY_FLOORS = (("toy", "toy.model"), ("toy.sources",), ("toy.sinks",))


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # an arrow back up, hidden inside a function, relative
            {
                "toy/model/names.py": "def f():\n    from ...toy.sinks import out\n",
                "toy/sinks/out.py": "",
            },
            ["toy.model.names (floor 1) imports toy.sinks.out (floor 3): back up"],
        ),
        (  # a circle inside one floor, one side under TYPE_CHECKING
            {
                "toy/sources/a.py": "from toy.sources.b import B\n",
                "toy/sources/b.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from toy.sources import a\n",
            },
            ["circle: toy.sources.a -> toy.sources.b -> toy.sources.a"],
        ),
        (  # a package nobody placed
            {"toy/attic/old.py": "import toy.model\n", "toy/model/__init__.py": ""},
            [
                "toy.attic: on no floor (add it to FLOORS)",
                "toy.attic.old: on no floor (add it to FLOORS)",
            ],
        ),
    ],
)
def test_the_check_fails_on_a_synthetic_violation(
    tmp_path: Path, files: Mapping[str, str], expected: list[str]
) -> None:
    root = _tree(tmp_path, {"toy/__init__.py": "", **files})
    for package in {str(Path(p).parent) for p in files}:
        init = root / package / "__init__.py"
        if not init.exists():
            init.write_text("", encoding="utf-8")
    assert violations(imports(root, "toy"), _TOY_FLOORS) == expected


def test_an_allowed_arrow_is_left_out(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "toy/__init__.py": "",
            "toy/model/__init__.py": "",
            "toy/model/names.py": "import toy.sinks.out\n",
            "toy/sinks/__init__.py": "",
            "toy/sinks/out.py": "",
        },
    )
    graph = imports(root, "toy")
    assert violations(graph, _TOY_FLOORS) != []
    assert violations(graph, _TOY_FLOORS, [("toy.model.names", "toy.sinks.out")]) == []
