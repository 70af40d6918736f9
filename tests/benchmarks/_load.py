"""Import a script under benchmarks/ as a module, with its sibling helpers importable."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str, as_name: str) -> ModuleType:
    """benchmarks/<name>.py as the module `as_name` (its `from _report import ...` works)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(as_name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[as_name] = mod
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return mod
