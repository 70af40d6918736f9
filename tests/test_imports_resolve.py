"""Every `bubblewatch` import in the benchmarks, scripts, dashboards and tests names a module
and a name that exist, including imports inside functions, which neither mypy (it reads the
package only) nor collection sees until the function runs: a module moved by a refactor
otherwise breaks a benchmark only when someone runs it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("benchmarks", "scripts", "dashboards", "tests")


def _unresolved(path: Path, base: Path = ROOT) -> list[str]:
    where = path.relative_to(base)
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "bubblewatch":
                continue
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                out.append(f"{where}:{node.lineno}: {e}")
                continue
            for alias in node.names:
                if hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    out.append(f"{where}:{node.lineno}: {node.module} has no {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "bubblewatch":
                    try:
                        importlib.import_module(alias.name)
                    except ImportError as e:
                        out.append(f"{where}:{node.lineno}: {e}")
    return out


def test_every_bubblewatch_import_outside_the_package_resolves() -> None:
    files = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(files) > 100
    assert [line for p in files for line in _unresolved(p)] == []


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text("def f():\n    from bubblewatch.topology.vllm_batches import x\n")
    assert _unresolved(bad, tmp_path) == [
        "probe.py:2: No module named 'bubblewatch.topology.vllm_batches'"
    ]
