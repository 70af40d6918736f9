"""The facts schema's types: scalars, lists, maps and records of documented fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scalar:
    """A bool, int, double or string; `nullable` when it may be unknown (null)."""

    kind: str
    nullable: bool = True

    def describe(self) -> str:
        return self.kind + ("?" if self.nullable else "")


@dataclass(frozen=True)
class ListOf:
    """A list whose elements all have one type; `nullable` when the whole list may be null."""

    elem: FieldType
    nullable: bool = False

    def describe(self) -> str:
        return f"list<{self.elem.describe()}>" + ("?" if self.nullable else "")


@dataclass(frozen=True)
class MapOf:
    """A map with string keys not known in advance: index it (`m["k"]`) or test `"k" in m`."""

    value: FieldType

    def describe(self) -> str:
        return f"map<string, {self.value.describe()}>"


@dataclass(frozen=True)
class Struct:
    """A record with named fields, each documented."""

    name: str
    fields: Mapping[str, Field] = field(default_factory=dict)

    def describe(self) -> str:
        return self.name


FieldType = Scalar | ListOf | MapOf | Struct


@dataclass(frozen=True)
class Field:
    type: FieldType
    doc: str


def scalar(kind: str, doc: str, nullable: bool = True) -> Field:
    """A field holding one bool, int, double or string."""
    return Field(Scalar(kind, nullable), doc)


def list_of(kind: str, doc: str) -> Field:
    """A field holding a list (never null) of non-null scalars."""
    return Field(ListOf(Scalar(kind, nullable=False)), doc)


def map_of(kind: str, doc: str) -> Field:
    """A field holding a string-keyed map of non-null scalars."""
    return Field(MapOf(Scalar(kind, nullable=False)), doc)


def struct(name: str, fields: Mapping[str, Field], doc: str) -> Field:
    """A field holding a record of its own."""
    return Field(Struct(name, fields), doc)
