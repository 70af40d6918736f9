"""YAML with bounds: the loader every YAML file bubblewatch reads goes through.

PyYAML's SafeLoader builds no objects from tags, but it bounds nothing: a few
hundred nested brackets exhaust Python's stack (RecursionError, in the
composer or in whatever walks the result), a few lines of aliases ("billion
laughs") expand to gigabytes in any code that walks the tree, and a
5000-digit integer makes `int()` raise. `BoundedLoader` composes with a
depth bound, counts nodes with every alias counted each time it is used
(refusing an alias to itself), and bounds integers in digits, each breach a
`YamlLimitError` naming the line; `read_yaml_text` bounds the file's size.
Loaders that need their own constructors subclass `BoundedLoader`.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from bubblewatch.errors import BubblewatchError
from bubblewatch.limits import (
    LIMITS_DOC,
    MAX_INT_DIGITS,
    YAML_MAX_BYTES,
    YAML_MAX_DEPTH,
    YAML_MAX_NODES,
    read_capped,
)


class YamlLimitError(BubblewatchError, ValueError):
    """A YAML document beyond a bound; `line` is 1-based (None when not known)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(f"{message} (see {LIMITS_DOC})")
        self.line = line


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with bounded nesting, expanded size and integers (module docstring)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise YamlLimitError(f"alias *{event.anchor} refers to itself", line)
        self._depth += 1
        if self._depth > YAML_MAX_DEPTH:
            raise YamlLimitError(f"nests deeper than {YAML_MAX_DEPTH} levels", line)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None and id(node) not in self._sizes:
            size = 1 + sum(self._sizes[id(child)] for child in _children(node))
            if size > YAML_MAX_NODES:
                raise YamlLimitError(
                    f"has more than {YAML_MAX_NODES} values (each alias counted every time "
                    "it is used)",
                    line,
                )
            self._sizes[id(node)] = size
        return node

    def construct_bounded_int(self, node: yaml.ScalarNode) -> Any:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise YamlLimitError(
                f"an integer with more than {MAX_INT_DIGITS} digits", node.start_mark.line + 1
            )
        return self.construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_bounded_int)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def read_yaml_text(path: str | os.PathLike[str], max_bytes: int = YAML_MAX_BYTES) -> str:
    """The file as text: LimitError past `max_bytes`; OSError and UnicodeDecodeError pass."""
    return read_capped(path, max_bytes).decode("utf-8")


def compose_and_construct(
    text: str, loader_cls: type[BoundedLoader] = BoundedLoader
) -> tuple[yaml.Node | None, Any]:
    """Parse one document once: its node tree (for line numbers) and its data.

    Raises YamlLimitError past a bound, yaml.YAMLError on bad YAML (characters
    YAML does not allow included).
    """
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        return node, (None if node is None else loader.construct_document(node))
    finally:
        loader.dispose()
