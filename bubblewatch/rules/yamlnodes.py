"""Safe YAML for rule files: plain data with the line of every node.

Built on `yaml.compose` (no object construction), then converted by hand:
scalars through PyYAML's SafeConstructor, mappings with duplicate keys
rejected, anchors and aliases rejected (no billion-laughs expansion), and
the file and node count capped; nesting and integers are bounded by
`bubblewatch.safeyaml.BoundedLoader`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from bubblewatch.rules.errors import RuleError
from bubblewatch.safeyaml import BoundedLoader, YamlLimitError

MAX_FILE_BYTES = 1 << 20
MAX_NODES = 50_000
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")
)


@dataclass(frozen=True)
class Y:
    """One YAML node: `value` is a dict[str, Y], a list[Y] or a scalar; `line` is 1-based."""

    value: Any
    line: int

    def plain(self) -> Any:
        """The node as plain Python data, lines dropped."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value

    def items(self) -> Iterator[tuple[str, Y]]:
        assert isinstance(self.value, dict)
        return iter(self.value.items())


def parse_yaml(text: str, path: str) -> Y:
    """Parse one document; RuleError with file and line on anything unsafe or malformed."""
    if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
        raise RuleError(f"file is larger than {MAX_FILE_BYTES} bytes", path=path)
    loader: BoundedLoader | None = None
    try:
        loader = BoundedLoader(text)  # bounded nesting and integers (bubblewatch.safeyaml)
        node = loader.get_single_node()
        if node is None:
            raise RuleError("file is empty", path=path)
        return _Converter(path, loader).convert(node)
    except YamlLimitError as e:
        raise RuleError(str(e), path=path, line=e.line) from None
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else None
        raise RuleError(f"YAML syntax error: {e.problem or e}", path=path, line=line) from None
    except yaml.YAMLError as e:
        raise RuleError(f"YAML error: {e}", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()


class _Converter:
    def __init__(self, path: str, constructor: BoundedLoader) -> None:
        self.path = path
        self.seen: set[int] = set()
        self.constructor = constructor

    def convert(self, root: yaml.Node) -> Y:
        # Iterative: a deeply nested document cannot exhaust the Python stack.
        out: dict[int, Y] = {}
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            line = node.start_mark.line + 1
            if not done:
                if node.tag not in _PLAIN_TAGS:
                    raise RuleError(
                        f"YAML tag {node.tag!r} is not allowed", path=self.path, line=line
                    )
                if id(node) in self.seen:
                    raise RuleError(
                        "anchors and aliases are not allowed", path=self.path, line=line
                    )
                self.seen.add(id(node))
                if len(self.seen) > MAX_NODES:
                    raise RuleError(f"file has more than {MAX_NODES} YAML nodes", path=self.path)
                stack.append((node, True))
                if isinstance(node, yaml.MappingNode):
                    for k, v in node.value:
                        stack.extend([(k, False), (v, False)])
                elif isinstance(node, yaml.SequenceNode):
                    stack.extend((v, False) for v in node.value)
                continue
            out[id(node)] = self._build(node, line, out)
        return out[id(root)]

    def _build(self, node: yaml.Node, line: int, built: dict[int, Y]) -> Y:
        if isinstance(node, yaml.MappingNode):
            d: dict[str, Y] = {}
            for k, v in node.value:
                key = built[id(k)].value
                if not isinstance(key, str):
                    raise RuleError(
                        f"mapping key must be a string, got {key!r}",
                        path=self.path,
                        line=k.start_mark.line + 1,
                    )
                if key in d:
                    raise RuleError(
                        f"duplicate key {key!r}", path=self.path, line=k.start_mark.line + 1
                    )
                d[key] = built[id(v)]
            return Y(d, line)
        if isinstance(node, yaml.SequenceNode):
            return Y([built[id(v)] for v in node.value], line)
        try:
            value = self.constructor.construct_object(node)
        except yaml.constructor.ConstructorError as e:
            raise RuleError(f"bad scalar: {e}", path=self.path, line=line) from None
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            raise RuleError(
                f"unsupported value type {type(value).__name__}", path=self.path, line=line
            )
        return Y(value, line)
