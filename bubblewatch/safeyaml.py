"""The one YAML reader: bounded, plain data, and the line of every value.

Every YAML file bubblewatch reads (daemon and web config, static topology,
scenarios, rule files and rule tests, training configs) and every YAML value
given on a command line goes through `parse_yaml` (or `load_yaml_file`,
which reads the file first). It returns a `YamlNode` tree: each value with
its 1-based line, each mapping with the line of each key, so errors can say
where. Every problem is raised as the caller's own error class (`error=`,
for example `RuleError` or `ConfigError`) with the path and line, so one
set of messages serves every file.

Bounds. PyYAML's SafeLoader builds no objects from tags, but it bounds
nothing: a few hundred nested brackets exhaust Python's stack, a few lines
of aliases ("billion laughs") expand to gigabytes in any code that walks the
tree, and a 5000-digit integer makes `int()` raise. The loader here composes
with a depth bound, counts nodes with every alias counted each time it is
used (refusing an alias to itself) and bounds integers in digits, and the
text is bounded in size (the limits in `bubblewatch.limits`).

Plain data. Scalars are strings, integers, floats, booleans and null;
mapping keys are strings, each once. `1e12` and `2.5e-5` read as floats
(YAML 1.2; YAML 1.1 wants a dot and a sign), `2025-01-01` stays a string
(no timestamps), and any other tag (`!!binary`, `!!set`, `!!python/...`) is
refused. Anchors and aliases are allowed, bounded as above, unless the
caller passes `aliases=False` (rule files, which are read as programs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from bubblewatch.errors import BubblewatchError
from bubblewatch.limits import (
    LIMITS_DOC,
    MAX_INT_DIGITS,
    YAML_MAX_BYTES,
    YAML_MAX_DEPTH,
    YAML_MAX_NODES,
    LimitError,
    read_capped,
)

_TAG = "tag:yaml.org,2002:"
_PLAIN_TAGS = frozenset(_TAG + t for t in ("str", "int", "float", "bool", "null", "map", "seq"))


class YamlError(BubblewatchError, ValueError):
    """The default error of `parse_yaml`: names the file, line and field like InputError."""

    def __init__(
        self, message: str, *, path: str = "", line: int | None = None, field: str | None = None
    ) -> None:
        self.reason, self.path, self.line, self.field = message, path, line, field
        where = (path or "<input>") + ("" if line is None else f":{line}")
        super().__init__(f"{where}{f': field {field!r}' if field else ''}: {message}")


class ErrorClass(Protocol):
    """How a caller's error class is built: an InputError subclass fits."""

    def __call__(
        self, message: str, *, path: str = ..., line: int | None = ..., field: str | None = ...
    ) -> Exception: ...


@dataclass(frozen=True)
class YamlNode:
    """One value: `value` is a dict[str, YamlNode], a list[YamlNode] or a scalar.

    `line` is where the value starts (1-based); `key_lines` gives, for a
    mapping, the line of each key.
    """

    value: Any
    line: int
    key_lines: Mapping[str, int] = field(default_factory=dict)

    def plain(self) -> Any:
        """The value as plain Python data, lines dropped."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value

    def items(self) -> Iterator[tuple[str, YamlNode]]:
        assert isinstance(self.value, dict)
        return iter(self.value.items())

    def line_at(self, *path: str | int) -> int:
        """The line of the value at `path` (keys and list indexes), else of its nearest parent."""
        node = self
        for key in path:
            held = node.value
            in_map = isinstance(held, dict) and isinstance(key, str) and key in held
            in_list = isinstance(held, list) and isinstance(key, int) and 0 <= key < len(held)
            if not (in_map or in_list):
                break
            node = held[key]
        return node.line

    def lines_by_path(self, where: str = "") -> dict[str, int]:
        """Line of every value by dotted path: '' the root, 'a.b', 'a.list[0]'."""
        out = {where: self.line}
        if isinstance(self.value, dict):
            for k, v in self.value.items():
                out.update(v.lines_by_path(f"{where}.{k}" if where else k))
        elif isinstance(self.value, list):
            for i, v in enumerate(self.value):
                out.update(v.lines_by_path(f"{where}[{i}]"))
        return out


class _LimitExceeded(BubblewatchError):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(f"{message} (see {LIMITS_DOC})")
        self.line = line


class _Problem(BubblewatchError):
    """A value that is YAML but not plain data; `line` and `field` say where."""

    def __init__(self, message: str, line: int, field: str | None = None) -> None:
        super().__init__(message)
        self.line, self.field = line, field


class _Alias(yaml.Node):
    """`*name` where it is written: the anchored node, and the alias's own line."""

    def __init__(self, target: yaml.Node, mark: Any) -> None:
        super().__init__(target.tag, target, mark, mark)
        self.target = target


class _Loader(yaml.SafeLoader):
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
                raise _LimitExceeded(f"alias *{event.anchor} refers to itself", line)
            if target is not None:  # (an unknown alias: PyYAML's own error)
                self.get_event()  # type: ignore[no-untyped-call]
                alias = _Alias(target, event.start_mark)
                self._sizes[id(alias)] = self._sizes[id(target)]
                return alias
        self._depth += 1
        if self._depth > YAML_MAX_DEPTH:
            raise _LimitExceeded(f"nests deeper than {YAML_MAX_DEPTH} levels", line)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None and id(node) not in self._sizes:
            size = 1 + sum(self._sizes[id(child)] for child in _children(node))
            if size > YAML_MAX_NODES:
                raise _LimitExceeded(
                    f"has more than {YAML_MAX_NODES} values (each alias counted every time "
                    "it is used)",
                    line,
                )
            self._sizes[id(node)] = size
        return node

    def construct_bounded_int(self, node: yaml.ScalarNode) -> Any:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _LimitExceeded(
                f"an integer with more than {MAX_INT_DIGITS} digits", node.start_mark.line + 1
            )
        return self.construct_yaml_int(node)


_Loader.add_constructor(_TAG + "int", _Loader.construct_bounded_int)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TAG + "timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _TAG + "float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def parse_yaml(
    text: str, path: str = "", error: ErrorClass = YamlError, *, aliases: bool = True
) -> YamlNode | None:
    """One document as a YamlNode tree, None when it is empty; `error` names file and line."""
    if len(text) > YAML_MAX_BYTES or len(text.encode("utf-8", "replace")) > YAML_MAX_BYTES:
        raise error(f"file is larger than {YAML_MAX_BYTES} bytes (see {LIMITS_DOC})", path=path)
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        return None if root is None else _Converter(loader, aliases).convert(root, "")
    except _LimitExceeded as e:
        raise error(str(e), path=path, line=e.line) from None
    except _Problem as e:
        raise error(str(e), path=path, line=e.line, field=e.field) from None
    except yaml.reader.ReaderError as e:  # a character YAML refuses, by offset
        message = f"not valid YAML: unacceptable character #x{e.character:04x}: {e.reason}"
        raise error(message, path=path, line=text.count("\n", 0, e.position) + 1) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = None if mark is None else mark.line + 1
        problem = e.problem or e.context or "malformed"
        if problem.startswith("but ") and e.context:  # "expected a single document ..."
            problem = f"{e.context}, {problem}"
        raise error(f"not valid YAML: {problem}", path=path, line=line) from None
    except yaml.YAMLError as e:
        raise error(f"not valid YAML: {e}", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_file(
    path: str | os.PathLike[str],
    error: ErrorClass = YamlError,
    *,
    aliases: bool = True,
    what: str = "",
) -> YamlNode | None:
    """Read (at most YAML_MAX_BYTES) and parse a file; every problem an `error` naming it.

    `what` names the file in a read error ("cannot read topology file: ...").
    """
    where = os.fspath(path)
    cannot = f"cannot read {what}:" if what else "cannot read:"
    try:
        text = read_yaml_text(path)
    except OSError as e:
        raise error(f"{cannot} {e.strerror or e}", path=where) from None
    except UnicodeDecodeError:
        raise error(f"{cannot} not UTF-8 text", path=where) from None
    except LimitError as e:
        raise error(e.reason, path=where) from None
    return parse_yaml(text, where, error, aliases=aliases)


def yaml_value(text: str, error: ErrorClass = YamlError, *, where: str = "") -> Any:
    """A value written in YAML on a command line (`--set pp_size=4`); None when empty."""
    node = parse_yaml(text, where, error)
    return None if node is None else node.plain()


def read_yaml_text(path: str | os.PathLike[str], max_bytes: int = YAML_MAX_BYTES) -> str:
    """The file as text: LimitError past `max_bytes`; OSError and UnicodeDecodeError pass."""
    return read_capped(path, max_bytes).decode("utf-8")


class _Converter:
    """Composed nodes to YamlNodes: plain tags and string keys only, aliases if allowed."""

    def __init__(self, loader: _Loader, aliases: bool) -> None:
        self.loader = loader
        self.aliases = aliases
        self.built: dict[int, YamlNode] = {}  # id(composed node) -> its YamlNode, for aliases

    def convert(self, node: yaml.Node, where: str) -> YamlNode:
        line = node.start_mark.line + 1
        if isinstance(node, _Alias):
            if not self.aliases:
                raise _Problem("anchors and aliases are not allowed", line, where or None)
            return self.built[id(node.target)]
        if node.tag == _TAG + "merge":
            raise _Problem("merge keys (<<) are not supported", line, where or None)
        if node.tag not in _PLAIN_TAGS:
            raise _Problem(f"YAML tag {node.tag!r} is not allowed", line, where or None)
        if isinstance(node, yaml.MappingNode):
            out = YamlNode(*self._mapping(node, where, line))
        elif isinstance(node, yaml.SequenceNode):
            out = YamlNode(
                [self.convert(v, f"{where}[{i}]") for i, v in enumerate(node.value)], line
            )
        else:
            out = YamlNode(self._scalar(node, line, where), line)
        self.built[id(node)] = out
        return out

    def _mapping(
        self, node: yaml.MappingNode, where: str, line: int
    ) -> tuple[dict[str, YamlNode], int, dict[str, int]]:
        values: dict[str, YamlNode] = {}
        key_lines: dict[str, int] = {}
        at = where or None
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Problem("mapping keys must be strings, got a collection", key_line, at)
            key = self.convert(key_node, where).value
            if not isinstance(key, str):
                raise _Problem(f"mapping keys must be strings, got {key!r}", key_line, at)
            child = f"{where}.{key}" if where else key
            if key in values:
                raise _Problem(f"duplicate key {key!r}", key_line, child)
            values[key] = self.convert(value_node, child)
            key_lines[key] = key_line
        return values, line, key_lines

    def _scalar(self, node: yaml.Node, line: int, where: str) -> Any:
        try:
            return self.loader.construct_object(node)
        except (yaml.YAMLError, ValueError, KeyError):
            kind = node.tag.removeprefix(_TAG)
            raise _Problem(f"not a valid {kind}: {node.value!r}", line, where or None) from None
