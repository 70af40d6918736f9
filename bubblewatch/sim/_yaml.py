"""YAML reading that remembers the line of every value, so errors can name it."""

from __future__ import annotations

import re
from typing import Any

import yaml

from bubblewatch.safeyaml import BoundedLoader, YamlLimitError
from bubblewatch.sim.errors import ScenarioError


class _Loader(BoundedLoader):
    """Bounded SafeLoader that also reads `1e12` and `2.5e-5` as floats (YAML 1.2 style)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_with_lines(text: str, path: str) -> tuple[Any, dict[str, int]]:
    """Parse `text`; returns the value and a map from dotted field path to 1-based line."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError("empty file: expected a mapping of scenario fields", path=path)
        lines: dict[str, int] = {}
        value = _convert(loader, node, "", lines, path)
    except YamlLimitError as e:
        raise ScenarioError(str(e), path=path, line=e.line) from None
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else None
        raise ScenarioError(f"not valid YAML: {e.problem}", path=path, line=line) from e
    except yaml.YAMLError as e:
        raise ScenarioError(f"not valid YAML: {e}", path=path) from e
    finally:
        if loader is not None:
            loader.dispose()
    return value, lines


def _convert(loader: _Loader, node: yaml.Node, where: str, lines: dict[str, int], path: str) -> Any:
    lines[where] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ScenarioError(
                    f"keys must be strings, got {key!r}",
                    path=path,
                    line=key_node.start_mark.line + 1,
                    field=where or None,
                )
            child = f"{where}.{key}" if where else key
            if key in out:
                raise ScenarioError(
                    "duplicate key", path=path, line=key_node.start_mark.line + 1, field=child
                )
            out[key] = _convert(loader, value_node, child, lines, path)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _convert(loader, item, f"{where}[{i}]", lines, path)
            for i, item in enumerate(node.value)
        ]
    return loader.construct_object(node, deep=True)
