"""Which command-line flags a given engine version accepts.

The tables (`flags.json` in each engine's package, named by its
`Engine.flag_data`) are generated from the engines' released wheels by
`scripts/engine_flags.py` (docs/engines.md says how, and each span
names the file and line that defines the flag). `table_for("sglang",
"0.5.11")` gives that release's table; a version between two tabulated
releases (a dev build, a vLLM release the table skips) takes the table of the
nearest release below it, and one newer than every table takes the newest
(`exact` is False in both cases, and `note` says so). A version older than
every table, or none at all, gives None: the caller must say that the version
is unknown rather than guess.

`FlagTable.resolve` follows the engine's parser: an exact spelling, else (with
argparse's `allow_abbrev`) a unique prefix; a prefix of several flags is
ambiguous and the engine rejects it, as SGLang 0.5.20 rejects
`--cuda-graph-max-bs` once only `--cuda-graph-max-bs-decode`/`-prefill` exist.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from bubblewatch.engines.registry import get
from bubblewatch.engines.versions import normalise_version, version_key

__all__ = [
    "FlagSpec",
    "FlagTable",
    "Resolution",
    "first_release",
    "live_key",
    "newest_table",
    "release_spelling",
    "table_for",
    "tabulated_versions",
]


def _tabulated(engine: str) -> bool:
    known = get(engine)
    return known is not None and known.flag_data is not None


@dataclass(frozen=True)
class FlagSpec:
    """One spelling of a flag in one release."""

    name: str
    dest: str
    nargs: str  # "0" (no value), "1", "?", "+", "*"
    default: Any = None
    deprecated: bool = False
    rejected: bool = False  # registered only to stop the launch with a message
    replaced_by: str | None = None
    negatable: bool = False
    where: str = ""  # file:line in the release's wheel

    @property
    def takes_value(self) -> bool:
        return self.nargs != "0"


@dataclass(frozen=True)
class Resolution:
    """What the engine's parser makes of one spelling: a flag, or why it refuses it."""

    spec: FlagSpec | None
    problem: str | None = None  # None when accepted

    @property
    def ok(self) -> bool:
        return self.spec is not None and self.problem is None


@dataclass(frozen=True)
class FlagTable:
    """The flags one engine version accepts."""

    engine: str
    version: str  # the version asked about
    table_version: str  # the release whose table this is
    exact: bool
    flags: Mapping[str, FlagSpec]
    allow_abbrev: bool = True
    underscores_as_dashes: bool = False

    @property
    def note(self) -> str:
        if self.exact:
            return f"{self.engine} {self.version} flag table"
        return (
            f"{self.engine} {self.version} is not tabulated; judged by the table of "
            f"{self.table_version}"
        )

    def _canonical(self, name: str) -> str:
        if self.underscores_as_dashes and name.startswith("--"):
            return "--" + name[2:].replace("_", "-")
        return name

    def resolve(self, name: str) -> Resolution:
        """The flag the engine's parser takes `name` (no `=value`) to be."""
        name = self._canonical(name)
        spec = self.flags.get(name)
        if spec is None and self.allow_abbrev and name.startswith("--") and len(name) > 2:
            matches = sorted(n for n in self.flags if n.startswith(name))
            dests = {self.flags[n].dest for n in matches}
            if len(dests) > 1:
                return Resolution(
                    None,
                    f"{self.engine} {self.version} rejects {name}: ambiguous, it could be "
                    + ", ".join(matches),
                )
            if matches:
                spec = self.flags[matches[0]]
        if spec is None:
            return Resolution(None, f"{self.engine} {self.version} has no flag {name}")
        if spec.rejected:
            why = f"; use {spec.replaced_by}" if spec.replaced_by else ""
            return Resolution(spec, f"{self.engine} {self.version} refuses {name}{why}")
        return Resolution(spec)

    def accepts(self, name: str) -> bool:
        return self.resolve(name).ok

    def spellings(self, dest: str) -> tuple[str, ...]:
        """Every spelling of the flag stored in `dest` (aliases and --no- forms)."""
        return tuple(sorted(n for n, s in self.flags.items() if s.dest == dest))


@functools.lru_cache(maxsize=8)
def _data(engine: str) -> dict[str, Any]:
    known = get(engine)
    assert known is not None and known.flag_data is not None
    text = resources.files(known.flag_data).joinpath("flags.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def tabulated_versions(engine: str) -> tuple[str, ...]:
    """The releases the engine's table was generated from, oldest first."""
    if not _tabulated(engine):
        return ()
    return tuple(v["version"] for v in _data(engine)["versions"])


@functools.lru_cache(maxsize=64)
def _table(engine: str, table_version: str) -> dict[str, FlagSpec]:
    data = _data(engine)
    key = version_key(table_version)
    out: dict[str, FlagSpec] = {}
    for name, spans in data["flags"].items():
        for s in spans:
            if version_key(s["from"]) <= key <= version_key(s["to"]):
                out[name] = FlagSpec(
                    name=name,
                    dest=s["dest"],
                    nargs=s["nargs"],
                    default=s.get("default"),
                    deprecated=bool(s.get("deprecated")),
                    rejected=bool(s.get("rejected")),
                    replaced_by=s.get("replaced_by"),
                    negatable=bool(s.get("negatable")),
                    where=s.get("where", ""),
                )
                break
    return out


def table_for(engine: str, version: str | None) -> FlagTable | None:
    """The flag table for `engine` at `version`; None when either is unknown or too old."""
    v = normalise_version(version)
    if not _tabulated(engine) or v is None:
        return None
    releases = tabulated_versions(engine)
    key = version_key(v)
    below = [r for r in releases if version_key(r) <= key]
    if not below:
        return None
    chosen = below[-1]
    parser = _data(engine).get("parser", {})
    return FlagTable(
        engine=engine,
        version=v,
        table_version=chosen,
        exact=version_key(chosen) == key,
        flags=_table(engine, chosen),
        allow_abbrev=bool(parser.get("allow_abbrev", True)),
        underscores_as_dashes=bool(parser.get("underscores_as_dashes", False)),
    )


def first_release(engine: str, flag: str) -> str | None:
    """The first tabulated release that accepts `flag` as spelled, or None."""
    if not _tabulated(engine):
        return None
    spans = _data(engine)["flags"].get(flag)
    if not spans:
        return None
    ok = [s["from"] for s in spans if not s.get("rejected")]
    return min(ok, key=version_key) if ok else None


def newest_table(engine: str) -> FlagTable | None:
    """The newest release's table (for reading a command line whose version is unknown)."""
    releases = tabulated_versions(engine)
    return table_for(engine, releases[-1]) if releases else None


def release_spelling(table: FlagTable | None, flag: str) -> str | None:
    """`flag` as the table's release spells it (an older name it had), or None if it has none.

    Without a table (the version is unknown) the newest spelling is kept.
    """
    if table is None or table.accepts(flag):
        return flag
    for old in _renamed(table.engine).get(flag, ()):
        if table.accepts(old):
            return old
    return None


def live_key(table: FlagTable | None, key: str) -> str:
    """A live setting's name (`pp_max_micro_batch_size`) as the table's release names it."""
    if table is None:
        return key
    for new, olds in _renamed(table.engine).items():
        if new[2:].replace("-", "_") != key or table.accepts(new):
            continue
        for old in olds:
            res = table.resolve(old)
            if res.ok and res.spec is not None:
                return res.spec.dest
    return key


def _renamed(engine: str) -> Mapping[str, tuple[str, ...]]:
    known = get(engine)
    return {} if known is None else known.command.renamed
