"""The samples of a few named metrics in a Prometheus text page, without parsing the rest.

`prometheus_client`'s parser walks every character of every line in Python:
19.5 ms of CPU for a vLLM 0.32 page of 66 KB (581 lines), of which the load
reader wants two gauges. `samples_named(text, names)` gives what that parser
gives for those names, exactly, for a fraction of the cost:

- A page in the common, unambiguous shape (printable ASCII; `# HELP`/`# TYPE`
  with plain names; `name{label="value",...} value [timestamp]` with plain
  names, spaces between the parts, an integer timestamp and no label named
  twice) is checked by compiled patterns, then walked line by line through
  the same state machine as the parser's (family boundaries, `# TYPE`
  suffixes, the counter `_total` renaming, a sample of another family made
  a singleton), turning only the wanted samples into labels and values.
- Any other page (quoted or UTF-8 names, tabs or several values on a sample
  line, exemplars, CRLF, a bad line anywhere) goes to `prometheus_client`'s
  parser whole, so its answer and its error are the parser's own.

Both raise `ValueError` (or `TypeError`, `IndexError`, `OverflowError`, as the
parser does) for a page that is not Prometheus text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from bubblewatch.errors import BubblewatchError

__all__ = ["Series", "exposition_samples", "samples_named"]

Series = dict[str, list[tuple[dict[str, str], float]]]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_QUOTED = r'"[^"\\\n]*(?:\\[^\n][^"\\\n]*)*"'
_LABEL = rf"[a-zA-Z_][a-zA-Z0-9_]*={_QUOTED}"
_LABELS = rf"\{{(?:{_LABEL}(?:,{_LABEL})*,?)?\}}"
# What Python's int() or float() reads, and nothing else (no '_', no unicode digits).
_NUMBER = (
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])"
)
_TIMESTAMP = r"-?[0-9]{1,18}"  # the parser divides it by 1000: no overflow at this length
# One line; groups: HELP or TYPE, its name, the rest; any other comment; a sample's name,
# labels and value; a line of any other shape.
_LINES = re.compile(
    rf"^[ \t]*(?:#[ \t]+(HELP|TYPE)[ \t]+({_NAME})(?:[ \t]+([^\n]*))?"
    rf"|(#[^\n]*)"
    rf"|({_NAME})({_LABELS})? +({_NUMBER})(?: +{_TIMESTAMP})?"
    rf")?[ \t]*$|^([^\n]+)$",
    re.MULTILINE,
)
_PRINTABLE = bytes(range(0x20, 0x7F))
_QUOTED_RE = re.compile(_QUOTED)
_PAIR = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({_QUOTED})")
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPED = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}
# Metric() refuses any other type ('untyped' it makes 'unknown').
_TYPES = frozenset(_SUFFIXES) | {"gaugehistogram", "unknown", "info", "stateset", "untyped"}


class _OutsideShape(BubblewatchError):
    """The page is not in the common shape: the full parser decides (never leaves the module)."""


def samples_named(text: str, names: Iterable[str]) -> Series:
    """Labels and value of every sample named in `names`, in the parser's order."""
    wanted = frozenset(names)
    try:
        return _fast(text, wanted)
    except _OutsideShape:
        return exposition_samples(text, wanted)


def exposition_samples(text: str, names: Iterable[str]) -> Series:
    """The same, from `prometheus_client`'s parser over the whole page (the reference)."""
    wanted = frozenset(names)
    found: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def _fast(text: str, wanted: frozenset[str]) -> Series:
    if not text.isascii() or text.encode().translate(None, _PRINTABLE).strip(b"\t\n"):
        raise _OutsideShape  # a control character, or not ASCII
    rows = _LINES.findall(text)
    _check_label_names([row[5] for row in rows if row[5]])
    walk = _Walk(wanted)
    for kind, family, rest, comment, sample, labels, value, other in rows:
        if sample:
            walk.sample(sample, labels, value)
        elif kind == "HELP":
            walk.help(family)
        elif kind == "TYPE":
            walk.type(family, rest.rstrip(" \t"))
        elif other or "HELP" in comment or "TYPE" in comment:
            raise _OutsideShape
    walk.close()
    return walk.found


class _Walk:
    """The parser's state machine over families, keeping only the wanted samples."""

    def __init__(self, wanted: frozenset[str]) -> None:
        self.wanted = wanted
        # A counter's samples are renamed with `_total`: keep those that become wanted.
        self.keep = wanted | {n[:-6] for n in wanted if n.endswith("_total")}
        self.found: Series = {}
        self.name, self.typ = "", "untyped"
        self.allowed: tuple[str, ...] = ()
        self.pending: list[tuple[str, str, str]] = []  # the open family's kept samples

    def help(self, family: str) -> None:
        if family != self.name:
            self.close()
            self.name, self.typ, self.allowed, self.pending = family, "untyped", (family,), []

    def type(self, family: str, typ: str) -> None:
        if not typ:
            raise _OutsideShape  # the parser's error for a TYPE without a type
        if family != self.name:
            self.close()
            self.name, self.pending = family, []
        self.typ = typ
        self.allowed = tuple(family + s for s in _SUFFIXES.get(typ, ("",)))

    def sample(self, sample: str, labels: str, value: str) -> None:
        if sample not in self.allowed:
            self.close()
            self.name, self.typ, self.allowed, self.pending = "", "untyped", (), []
            self.add(sample, labels, value)  # a family of its own, untyped
        elif sample in self.keep:
            self.pending.append((sample, labels, value))

    def close(self) -> None:
        """The open family ends: the parser builds it (and may refuse it) and yields it."""
        name, typ = self.name, self.typ
        if not name:
            return
        if typ not in _TYPES or (typ == "counter" and name == "_total"):
            raise _OutsideShape  # the parser refuses the family: let it say why
        rename = typ == "counter" and not name.endswith("_total")
        for sample, labels, value in self.pending:
            self.add(sample + "_total" if rename else sample, labels, value)

    def add(self, sample: str, labels: str, value: str) -> None:
        if sample not in self.wanted:
            return
        pairs = {k: _unescape(v[1:-1]) for k, v in _PAIR.findall(labels)}
        self.found.setdefault(sample, []).append((pairs, _number(value)))


def _check_label_names(blocks: list[str]) -> None:
    """The parser refuses a label named twice in one set, and names starting with `__`."""
    joined = "\n".join(blocks)
    if "\\" in joined:
        joined = _QUOTED_RE.sub('""', joined)  # an escaped quote inside a value
    names_only = "".join(joined.split('"')[::2])  # {a=,b=}: each value is one quoted span
    for block in set(names_only.split("\n")):
        names = [n for n in block[1:-1].split(",") if n]
        if len(set(names)) != len(names) or any(n.startswith("__") for n in names):
            raise _OutsideShape


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED[m.group(0)], value) if "\\" in value else value


def _number(value: str) -> float:
    """As the parser reads a value: an int where int() takes it, else a float."""
    try:
        return int(value)
    except ValueError:
        return float(value)
