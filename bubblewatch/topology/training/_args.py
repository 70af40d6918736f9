"""Argument scanning shared by the launcher and framework parsers.

argparse-style: `--flag value`, `--flag=value`, the last occurrence wins.
Values are strings until a parser reads them with `int_value`, whose errors
name the flag. Which flags take no value must be known to split a launcher's
own flags from the program it starts; the callers pass those sets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from bubblewatch.errors import InputError
from bubblewatch.topology._tokenise import _is_number, _is_option

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_PYTHON_OPTS_WITH_ARG = frozenset({"-X", "-W", "-Q"})


class TrainingArgsError(InputError):
    """A training flag or config value the framework itself would reject."""


@dataclass(frozen=True)
class Program:
    """What a process runs: a script path or a module, and the program's own arguments."""

    script: str | None
    module: str | None
    args: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.module or (os.path.basename(self.script) if self.script else "")


def is_python(prog: str) -> bool:
    return _PYTHON.match(os.path.basename(prog)) is not None


def python_program(argv: Sequence[str]) -> Program | None:
    """`python [opts] script args` or `python [opts] -m module args`; None otherwise."""
    if not argv or not is_python(argv[0]):
        return None
    rest = list(argv[1:])
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "-m" and i + 1 < len(rest):
            return Program(None, rest[i + 1], tuple(rest[i + 2 :]))
        if a.startswith("-m") and len(a) > 2:
            return Program(None, a[2:], tuple(rest[i + 1 :]))
        if a == "-c":
            return None
        if a in _PYTHON_OPTS_WITH_ARG:
            i += 2
            continue
        if not a.startswith("-"):
            return Program(a, None, tuple(rest[i + 1 :]))
        i += 1
    return None


@dataclass(frozen=True)
class Scanned:
    """Options before the program, the program's position, and what follows it."""

    options: Mapping[str, str | bool]
    positional: str | None
    rest: tuple[str, ...]


def scan_options(
    args: Sequence[str],
    *,
    bare: Collection[str],
    aliases: Mapping[str, str] | None = None,
) -> Scanned:
    """A launcher's options up to its first positional (the program), then the rest.

    `bare` flags take no value; every other option takes the next word (or
    `=value`). `aliases` maps spellings to one name (`--nproc_per_node` ->
    `--nproc-per-node`).
    """
    names = aliases or {}
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return Scanned(opts, args[i + 1] if i + 1 < len(args) else None, tuple(args[i + 2 :]))
        if not a.startswith("-") or a == "-":
            return Scanned(opts, a, tuple(args[i + 1 :]))
        name, eq, value = a.partition("=")
        key = names.get(name, name)
        if eq:
            opts[key] = value
            i += 1
        elif name in bare or key in bare:
            opts[key] = True
            i += 1
        elif i + 1 < len(args):
            opts[key] = args[i + 1]
            i += 2
        else:
            opts[key] = True
            i += 1
    return Scanned(opts, None, ())


def flag_values(
    args: Sequence[str], aliases: Mapping[str, str] | None = None
) -> dict[str, str | bool]:
    """A program's flags: `--x v`, `--x=v`, bare `--x` as True; last occurrence wins.

    `aliases` maps other spellings to the one key used (argparse keeps the
    last value given under any of a flag's spellings).
    """
    names = aliases or {}
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-" or _is_number(a):
            i += 1
            continue
        name, eq, value = a.partition("=")
        key = names.get(name, name)
        if eq:
            out[key] = value
        elif i + 1 < len(args) and not _is_option(args[i + 1]):
            out[key] = args[i + 1]
            i += 1
        else:
            out[key] = True
        i += 1
    return out


def text(flags: Mapping[str, str | bool], name: str) -> str | None:
    """A flag's string value, or None when absent or given bare."""
    v = flags.get(name)
    return v if isinstance(v, str) else None


def int_value(text: str, *, name: str, where: str, minimum: int = 1) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise TrainingArgsError(
            f"{name} expects an integer, got {text!r}", path=where, field=name
        ) from None
    if v < minimum:
        raise TrainingArgsError(f"{name} must be >= {minimum}, got {v}", path=where, field=name)
    return v
