"""bubblewatch.engines is floor 2: it imports only the model, the root helpers and itself.

Regression guard for the engine packages (docs/engines.md): engine knowledge is
plain data and pure functions, so nothing in them may reach up to the readers
(topology, sources, sim) or anything above, nor read the world.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bubblewatch.engines

ALLOWED = {"engines", "model", "errors", "durations", "limits", "safeyaml", "http_client"}
WORLD = {"os", "socket", "subprocess", "urllib", "http", "time", "threading", "glob"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_engine_packages_import_only_floor_one_and_themselves() -> None:
    root = Path(bubblewatch.engines.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 10  # base, registry, flagtable, versions and three engine packages
    wrong = []
    for path in files:
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[0] == "bubblewatch" and (len(parts) < 2 or parts[1] not in ALLOWED):
                wrong.append(f"{path.relative_to(root)}:{line}: {name}")
            if parts[0] in WORLD:
                wrong.append(f"{path.relative_to(root)}:{line}: {name} (reads the world)")
    assert wrong == []
