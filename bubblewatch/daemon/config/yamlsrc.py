"""Typed access to YAML config files, so errors name the file, line and key.

`load_yaml` reads the file with `bubblewatch.safeyaml` and returns a `Section`
over the top-level mapping. A Section hands out typed values by key (`str_`,
`int_`, `duration_s`, `section`, ...), and `finish()` rejects keys nobody
asked for, naming each with its line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bubblewatch.durations import format_duration, parse_duration_s
from bubblewatch.errors import InputError
from bubblewatch.limits import DURATION_MAX_S
from bubblewatch.safeyaml import YamlNode, load_yaml_file

T = TypeVar("T")


class ConfigError(InputError):
    """A bad configuration value: names the file, line and dotted key."""


class _LineDict(dict[str, Any]):
    """A mapping that remembers the line (1-based) of each key and of itself."""

    line: int = 0
    key_lines: dict[str, int]
    # key -> the command-line flag that set it (errors then name the flag).
    flags: dict[str, str]


def load_yaml(path: Path) -> Section:
    """Parse `path`; an empty file is an empty mapping. Errors name file and line."""
    root = load_yaml_file(path, ConfigError)
    if root is None:
        data = _LineDict()
        data.line, data.key_lines = 1, {}
        return Section(data, str(path), "")
    if not isinstance(root.value, dict):
        raise ConfigError("the top level must be a mapping of keys", path=str(path), line=1)
    top = _line_data(root)
    assert isinstance(top, _LineDict)
    return Section(top, str(path), "")


def _line_data(node: YamlNode) -> Any:
    """The node as plain data, each mapping a _LineDict with its lines."""
    if isinstance(node.value, dict):
        d = _LineDict((k, _line_data(v)) for k, v in node.items())
        d.line, d.key_lines = node.line, dict(node.key_lines)
        return d
    if isinstance(node.value, list):
        return [_line_data(v) for v in node.value]
    return node.value


class Section:
    """Typed access to one mapping of a config file; `prefix` is its dotted key."""

    def __init__(self, data: _LineDict, path: str, prefix: str) -> None:
        self._data = data
        self.path = path
        self.prefix = prefix
        self._used: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def names(self) -> list[str]:
        return list(self._data)

    def line_of(self, key: str) -> int:
        return self._data.key_lines.get(key, self._data.line)

    def key_path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, message: str) -> ConfigError:
        flag = getattr(self._data, "flags", {}).get(key)
        if flag is not None:
            return ConfigError(message, path="command line", field=flag)
        line = self.line_of(key)
        return ConfigError(message, path=self.path, line=line, field=self.key_path(key))

    def raw(self, key: str) -> Any:
        self._used.add(key)
        return self._data.get(key)

    def get(self, key: str, default: T, convert: Callable[[Any], T]) -> T:
        """The value at `key` through `convert` (ValueError -> ConfigError), or `default`."""
        value = self.raw(key)
        if value is None:
            return default
        try:
            return convert(value)
        except (ValueError, TypeError) as e:
            raise self.error(key, str(e)) from None

    def str_(self, key: str, default: str) -> str:
        return self.get(key, default, _as_str)

    def opt_str(self, key: str) -> str | None:
        return self.get(key, None, _as_str)

    def int_(
        self, key: str, default: int, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        v = self.get(key, default, _as_int)
        if minimum is not None and v < minimum:
            raise self.error(key, f"must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            low = "" if minimum is None else f"{minimum}.."
            raise self.error(key, f"must be {low or 'at most '}{maximum}, got {v}")
        return v

    def bool_(self, key: str, default: bool) -> bool:
        return self.get(key, default, _as_bool)

    def duration_s(
        self,
        key: str,
        default: float,
        *,
        positive: bool = True,
        minimum_s: float = 0.0,
        maximum_s: float = DURATION_MAX_S,
    ) -> float:
        """A duration within its bounds (a huge one overflows a timer or never comes)."""
        v = self.get(key, default, parse_duration_s)
        if positive and v <= 0:
            raise self.error(key, f"must be a positive duration, got {self._data.get(key)!r}")
        if not minimum_s <= v <= maximum_s:
            high = format_duration(maximum_s)
            if minimum_s > 0:
                allowed = f"between {format_duration(minimum_s)} and {high}"
            else:
                allowed = f"{'more than' if positive else 'between'} 0 and at most {high}"
            raise self.error(key, f"must be {allowed}, got {self._data.get(key)!r}")
        return v

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        v = self.str_(key, default)
        if v not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}; got {v!r}")
        return v

    def section(self, key: str) -> Section:
        """The mapping at `key` (an empty one if absent)."""
        value = self.raw(key)
        if value is None:
            empty = _LineDict()
            empty.line, empty.key_lines = self.line_of(key), {}
            return Section(empty, self.path, self.key_path(key))
        if not isinstance(value, _LineDict):
            raise self.error(key, f"must be a mapping, got {type(value).__name__}")
        return Section(value, self.path, self.key_path(key))

    def sections(self, key: str) -> list[Section]:
        """The list of mappings at `key` (empty if absent)."""
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"must be a list, got {type(value).__name__}")
        out: list[Section] = []
        for i, item in enumerate(value):
            if not isinstance(item, _LineDict):
                raise self.error(key, f"item {i} must be a mapping, got {type(item).__name__}")
            out.append(Section(item, self.path, f"{self.key_path(key)}[{i}]"))
        return out

    def str_map(self, key: str) -> dict[str, str]:
        sec = self.section(key)
        out: dict[str, str] = {}
        for k in sec.names():
            out[k] = sec.str_(k, "")
        return out

    def set_override(self, dotted: str, value: object, flag: str) -> None:
        """Set `dotted` (e.g. 'web.listen_address') from the command-line `flag`."""
        head, _, rest = dotted.partition(".")
        if rest:
            if head not in self._data or self._data[head] is None:
                sub = _LineDict()
                sub.line, sub.key_lines = 0, {}
                self._data[head] = sub
                self._data.key_lines.setdefault(head, 0)
            child = self._data[head]
            if not isinstance(child, _LineDict):
                raise self.error(head, f"must be a mapping, got {type(child).__name__}")
            Section(child, self.path, self.key_path(head)).set_override(rest, value, flag)
            return
        self._data[head] = value
        if not hasattr(self._data, "flags"):
            self._data.flags = {}
        self._data.flags[head] = flag

    def finish(self) -> None:
        """Reject keys that were never read (typos), naming the first with its line."""
        unknown = [k for k in self._data if k not in self._used]
        if unknown:
            raise self.error(unknown[0], f"unknown key {unknown[0]!r}")


def user_path(sec: Section, key: str, value: str) -> Path:
    """`value` as a path with `~` and `~user` expanded; one that cannot be is `key`'s error.

    Path.expanduser raises RuntimeError for an unknown user (`~nobody-here/x`) and
    UnicodeEncodeError for a name with lone surrogates (`~\\ud800` in a JSON config).
    """
    try:
        return Path(value).expanduser()
    except (RuntimeError, UnicodeError):
        raise sec.error(key, f"cannot expand {value!r}: no such user's home directory") from None


def _as_str(v: Any) -> str:
    if isinstance(v, (dict, list)):
        raise ValueError(f"expected a string, got {type(v).__name__}")
    return str(v)


def _as_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def _as_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v
