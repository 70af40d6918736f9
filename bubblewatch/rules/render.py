"""A fix applied to an engine command line: the corrected argv and a diff of flags.

Pure string work on an argv that is redacted again on the way in, so a secret
can never reach the output even if a caller passes a raw command line.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bubblewatch.topology.redact import is_secret_name, redact_argv

# Flags that take no value: removing one must not swallow the next token.
BARE_FLAGS = frozenset(
    {
        "--disable-cuda-graph",
        "--enforce-eager",
        "--enable-metrics",
        "--trust-remote-code",
        "--enable-dp-attention",
        "--async-scheduling",
        "--disable-radix-cache",
        "--enable-torch-compile",
        "--disable-custom-all-reduce",
        "--enable-prefix-caching",
    }
)


@dataclass(frozen=True)
class Fix:
    """A fix with its templates rendered: what to change, for which engine."""

    engine: str | None
    add_flags: tuple[tuple[str, str | None], ...] = ()  # None: a bare flag
    remove_flags: tuple[str, ...] = ()
    set_env: tuple[tuple[str, str], ...] = ()
    note: str | None = None

    @property
    def changes_command(self) -> bool:
        return bool(self.add_flags or self.remove_flags or self.set_env)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "add_flags": {k: (True if v is None else v) for k, v in self.add_flags},
            "remove_flags": list(self.remove_flags),
            "set_env": {k: ("<redacted>" if is_secret_name(k) else v) for k, v in self.set_env},
            "note": self.note,
        }


@dataclass(frozen=True)
class RenderedFix:
    """The corrected command line (argv and shell text) and the diff from the current one."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    command: str
    diff: str
    removed: tuple[str, ...] = field(default=())
    added: tuple[str, ...] = field(default=())


def render_fix(argv: Sequence[str], fix: Fix) -> RenderedFix:
    """Apply a fix to a command line: change flags in place, drop flags, append new ones."""
    src = list(redact_argv(argv))
    wanted = dict(fix.add_flags)
    drop = set(fix.remove_flags)
    out: list[str] = []
    removed: list[str] = []
    added: list[str] = []
    done: set[str] = set()
    i = 0
    while i < len(src):
        tok = src[i]
        name, eq, _ = tok.partition("=")
        if not _is_flag(tok) or (name not in wanted and name not in drop):
            out.append(tok)
            i += 1
            continue
        takes_value = not eq and _next_is_value(src, i, name)
        old = [tok, src[i + 1]] if takes_value else [tok]
        i += len(old)
        if name in wanted and name not in done:
            done.add(name)
            new = _flag_tokens(name, wanted[name])
            out.extend(new)
            if new != old:
                removed.append(shlex.join(old))
                added.append(shlex.join(new))
        elif name not in wanted:
            removed.append(shlex.join(old))
    for name, value in fix.add_flags:
        if name not in done:
            new = _flag_tokens(name, value)
            out.extend(new)
            added.append(shlex.join(new))
    env = tuple((k, "<redacted>" if is_secret_name(k) else v) for k, v in fix.set_env)
    added_env = [f"{k}={shlex.quote(v)}" for k, v in env]
    command = " ".join([*added_env, shlex.join(out)]) if out else " ".join(added_env)
    lines = ["--- current", "+++ recommended"]
    lines += [f"- {r}" for r in removed]
    lines += [f"+ {a}" for a in [*added_env, *added]]
    return RenderedFix(
        argv=tuple(out),
        env=env,
        command=command,
        diff="\n".join(lines),
        removed=tuple(removed),
        added=tuple([*added_env, *added]),
    )


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not _is_number(tok)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _next_is_value(src: Sequence[str], i: int, name: str) -> bool:
    if name in BARE_FLAGS or i + 1 >= len(src):
        return False
    nxt = src[i + 1]
    return not _is_flag(nxt)


def _flag_tokens(name: str, value: str | None) -> list[str]:
    return [name] if value is None else [name, value]
