"""The one error tree: every exception class of the package derives from BubblewatchError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import bubblewatch
from bubblewatch.errors import BubblewatchError, InputError, UnavailableError


def _modules() -> list[str]:
    """Every module of the package but `__main__` (importing that runs the CLI)."""
    found = pkgutil.walk_packages(bubblewatch.__path__, "bubblewatch.")
    return sorted(m.name for m in found if not m.name.endswith(".__main__"))


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def test_the_walk_finds_the_package_errors() -> None:
    """The walk sees errors in sub-packages, so the check below can fail."""
    found = _exception_classes()
    assert "bubblewatch.sources.nvml.errors.NvmlError" in found
    assert "bubblewatch.rules.errors.RuleError" in found
    assert len(found) >= 30


def test_every_exception_class_derives_from_the_root() -> None:
    outside = sorted(
        n for n, c in _exception_classes().items() if not issubclass(c, BubblewatchError)
    )
    assert outside == []


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({}, "<input>: bad"),
        ({"path": "a.yaml", "line": 3, "field": "x"}, "a.yaml:3: field 'x': bad"),
    ],
)
def test_input_error_names_where(kwargs: dict[str, object], text: str) -> None:
    err = InputError("bad", **kwargs)  # type: ignore[arg-type]
    assert str(err) == text
    assert err.reason == "bad"
    assert isinstance(err, ValueError)


def test_categories_are_distinct() -> None:
    assert not issubclass(UnavailableError, InputError)
    assert not issubclass(InputError, UnavailableError)
