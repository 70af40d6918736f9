"""A fix applied to an engine command line: the corrected argv, a diff, and a live call.

Pure string work on an argv that is redacted again on the way in, so a secret
can never reach the output even if a caller passes a raw command line.

Flags are matched as the engine's parser reads them: an alias or an
abbreviation of a flag the fix changes or removes is that flag
(`--tp 8` is `--tp-size 8`), and a removal may name a value
(`--cuda-graph-backend-decode=disabled`, vLLM `-O=0`): only a flag given that
value is removed. With the running version's flag table, a fix that adds a
flag the version rejects is not rendered (`problems` says why), and one for
an unknown version carries a `caveat`. A live setting (`set_live`) becomes
the `POST /set_internal_state` call of a server that takes it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bubblewatch.errors import InputError
from bubblewatch.topology.redact import ASSIGNMENT, is_secret_name, redact_argv

if TYPE_CHECKING:  # the flag tables are imported where a fix is rendered, not at import
    from bubblewatch.engines.base import Engine
    from bubblewatch.engines.flagtable import FlagTable

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
    remove_flags: tuple[str, ...] = ()  # "--flag" or "--flag=value" (only with that value)
    set_env: tuple[tuple[str, str], ...] = ()
    note: str | None = None
    set_live: tuple[tuple[str, str], ...] = ()  # server settings a running server takes

    @property
    def changes_command(self) -> bool:
        return bool(self.add_flags or self.remove_flags or self.set_env)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "add_flags": {k: (True if v is None else v) for k, v in self.add_flags},
            "remove_flags": list(self.remove_flags),
            "set_env": {k: ("<redacted>" if is_secret_name(k) else v) for k, v in self.set_env},
            "set_live": dict(self.set_live),
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
    # Why the version's parser would refuse the corrected command line (then do not run it).
    problems: tuple[str, ...] = ()
    caveat: str | None = None  # the version is unknown: the flags could not be checked
    live: str | None = None  # the same change on the running server, no restart

    @property
    def valid(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Target:
    """What the fix is rendered for: the engine, its version's flag table, its HTTP server."""

    engine: str | None = None
    table: FlagTable | None = None
    base_url: str | None = None
    live_update: bool = False


def _known(name: str | None) -> Engine | None:
    """The engine's knowledge (its tables are imported at the first fix rendered)."""
    from bubblewatch import engines

    return engines.get(name)


class _Names:
    """Reads flag spellings as the engine's parser does, to match aliases and abbreviations."""

    def __init__(self, engine: str | None, table: FlagTable | None) -> None:
        known = _known(engine)
        self.hand = {} if known is None else known.command.options
        self.table = table
        self.glued_o = known is not None and "-O" in known.command.compilation_flags
        self.dashes = known is not None and known.command.underscores_as_dashes

    def split(self, tok: str) -> tuple[str, str | None]:
        """A token's flag name and inline value (`-O0` is `-O` with value 0 for vLLM)."""
        name, eq, value = tok.partition("=")
        if self.glued_o and name.startswith("-O") and not name.startswith("-O.") and len(name) > 2:
            return "-O", name[2:]
        return name, (value if eq else None)

    def key(self, name: str) -> str:
        if self.dashes and name.startswith("--") and "." not in name:
            name = "--" + name[2:].replace("_", "-")
        opt = self.hand.get(name)
        if opt is not None:
            return opt.flag
        if self.table is not None:
            res = self.table.resolve(name)
            if res.spec is not None:
                hand = next(
                    (a for a in self.table.spellings(res.spec.dest) if a in self.hand), None
                )
                return self.hand[hand].flag if hand else "dest:" + res.spec.dest
        return name

    def takes_value(self, name: str) -> bool | None:
        if name in BARE_FLAGS:
            return False
        opt = self.hand.get(name)
        if opt is not None:
            return opt.kind != "bool"
        if self.table is not None:
            res = self.table.resolve(name)
            if res.spec is not None:
                return res.spec.takes_value
        return None


def render_fix(argv: Sequence[str], fix: Fix, target: Target | None = None) -> RenderedFix:
    """Apply a fix to a command line: change flags in place, drop flags, append new ones."""
    tgt = target or Target(engine=fix.engine)
    fix = _for_release(fix, tgt.table)
    names = _Names(tgt.engine or fix.engine, tgt.table)
    src = list(redact_argv(argv))
    wanted = {names.key(k): (k, v) for k, v in fix.add_flags}
    drop: dict[str, list[str | None]] = {}
    for spec in fix.remove_flags:
        flag, eq, value = spec.partition("=")
        drop.setdefault(names.key(flag), []).append(value.lower() if eq else None)
    out: list[str] = []
    removed: list[str] = []
    added: list[str] = []
    done: set[str] = set()
    i = 0
    while i < len(src):
        tok = src[i]
        if not _is_flag(tok):
            out.append(tok)
            i += 1
            continue
        name, inline = names.split(tok)
        key = names.key(name)
        if key not in wanted and key not in drop:
            out.append(tok)
            i += 1
            continue
        takes_value = inline is None and _next_is_value(src, i, names.takes_value(name))
        old = [tok, src[i + 1]] if takes_value else [tok]
        given: str | None = inline if inline is not None else (src[i + 1] if takes_value else None)
        if key in wanted and key not in done:
            done.add(key)
            flag, new_value = wanted[key]
            new = _flag_tokens(flag, new_value)
            out.extend(new)
            if new != old:
                removed.append(shlex.join(old))
                added.append(shlex.join(new))
        elif key in drop and not _drops(drop[key], given):
            out.append(tok)
            i += 1
            continue
        elif key not in wanted:
            removed.append(shlex.join(old))
        i += len(old)
    for key, (flag, add_value) in wanted.items():
        if key not in done:
            new = _flag_tokens(flag, add_value)
            out.extend(new)
            added.append(shlex.join(new))
    out, replaced = _without_assignments(out, {k for k, _ in fix.set_env})
    removed.extend(replaced)
    env = tuple((k, "<redacted>" if is_secret_name(k) else v) for k, v in fix.set_env)
    added_env = [f"{k}={shlex.quote(v)}" for k, v in env]
    command = " ".join([*added_env, shlex.join(out)]) if out else " ".join(added_env)
    lines = ["--- current", "+++ recommended"]
    lines += [f"- {r}" for r in removed]
    lines += [f"+ {a}" for a in [*added_env, *added]]
    problems = _check(fix, out, tgt, names)
    return RenderedFix(
        argv=tuple(out),
        env=env,
        command=command,
        diff="\n".join(lines),
        removed=tuple(removed),
        added=tuple([*added_env, *added]),
        problems=problems,
        caveat=_caveat(fix, tgt),
        live=_live(fix, src, tgt),
    )


def _without_assignments(argv: list[str], names: set[str]) -> tuple[list[str], list[str]]:
    """`argv` without its leading `NAME=value` words (also after `env`) for the variables the
    fix sets, and those words: the shell keeps only the last assignment, so a fix put in front
    of the user's own would do nothing."""
    out: list[str] = []
    gone: list[str] = []
    leading = True
    for tok in argv:
        is_assignment = leading and ASSIGNMENT.match(tok) is not None
        if is_assignment and tok.split("=", 1)[0] in names:
            gone.append(shlex.quote(tok))
            continue
        if not is_assignment and tok != "env":
            leading = False
        out.append(tok)
    return out, gone


def _for_release(fix: Fix, table: FlagTable | None) -> Fix:
    """The fix with flags and live settings a release renamed spelled as that release does."""
    if table is None:
        return fix
    from bubblewatch.engines.flagtable import live_key, release_spelling

    add = tuple((release_spelling(table, k) or k, v) for k, v in fix.add_flags)
    live = tuple((live_key(table, k), v) for k, v in fix.set_live)
    if add == fix.add_flags and live == fix.set_live:
        return fix
    return replace(fix, add_flags=add, set_live=live)


def _check(fix: Fix, out: Sequence[str], tgt: Target, names: _Names) -> tuple[str, ...]:
    """What the version's parser would refuse among the flags the fix adds or keeps."""
    if tgt.table is None:
        return ()
    problems: list[str] = []
    for flag, _ in fix.add_flags:
        res = tgt.table.resolve(flag)
        if not res.ok and res.problem:
            problems.append(res.problem)
    for tok in out:
        if _is_flag(tok):
            name, _ = names.split(tok)
            res = tgt.table.resolve(name)
            # A kept long flag the release lacks (SGLang 0.5.13.post1 and
            # --cuda-graph-backend-decode) makes the command one it refuses too; short
            # tokens may be the launcher's (python -m), so only long flags are judged.
            lacks = res.spec is None and name.startswith("--")
            if (
                res.problem
                and ("ambiguous" in res.problem or lacks)
                and res.problem not in problems
            ):
                problems.append(res.problem)
    known = _known(tgt.engine or fix.engine)
    if known is not None and known.command.compilation_flags:
        # vLLM's -O/-cc/--optimization-level spellings and compilation-config keys are
        # rewritten by its parser before argparse sees them: judge them as it does.
        problems.extend(p for p in _vllm_parse_problems(out, tgt.table) if p not in problems)
    return tuple(problems)


def _vllm_parse_problems(argv: Sequence[str], table: FlagTable) -> tuple[str, ...]:
    """What vLLM's parser (at `table`'s release) refuses in a rendered command line."""
    from bubblewatch.topology.cmdline import parse_engine_cmdline

    try:
        cfg = parse_engine_cmdline(argv, {}, version=table.version)
    except InputError as e:
        return (str(e),)
    return cfg.problems if cfg is not None else ()


def _caveat(fix: Fix, tgt: Target) -> str | None:
    engine = tgt.engine or fix.engine
    known = _known(engine)
    if tgt.table is not None or known is None or known.flag_data is None or not fix.add_flags:
        return None
    from bubblewatch.engines.flagtable import first_release

    since = []
    for flag, _ in fix.add_flags:
        first = first_release(known.name, flag)
        if first is not None:
            since.append(f"{flag} exists from {known.name} {first}")
    tail = f" ({'; '.join(since)})" if since else ""
    return f"{known.name} version unknown: flags not checked against its release{tail}"


def _live(fix: Fix, argv: Sequence[str], tgt: Target) -> str | None:
    """`curl` that changes the settings on the running server (SGLang's), or None."""
    known = _known(tgt.engine or fix.engine)
    api = None if known is None else known.live
    if not fix.set_live or not tgt.live_update or tgt.base_url is None or api is None:
        return None
    if api.set_path is None:
        return None
    settings: dict[str, Any] = {}
    for k, v in fix.set_live:
        settings[k] = int(v) if v.strip().lstrip("-").isdigit() else v
    body = json.dumps({"server_args": settings})
    parts = [
        "curl -s -X POST",
        shlex.quote(f"{tgt.base_url}{api.set_path}"),
        "-H 'Content-Type: application/json'",
    ]
    heads = {a.partition("=")[0] for a in argv}
    if api.admin_key_flag in heads and api.admin_key_env:
        parts.append(f'-H "Authorization: Bearer ${api.admin_key_env}"')
    elif api.api_key_flag in heads and api.api_key_env:
        parts.append(f'-H "Authorization: Bearer ${api.api_key_env}"')
    parts += ["-d", shlex.quote(body)]
    return " ".join(parts)


def _drops(values: list[str | None], value: str | None) -> bool:
    """Whether a flag given `value` is removed by specs with these values (None: any)."""
    return any(v is None or (value is not None and value.strip().lower() == v) for v in values)


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not _is_number(tok)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _next_is_value(src: Sequence[str], i: int, takes: bool | None) -> bool:
    if takes is False or i + 1 >= len(src):
        return False
    nxt = src[i + 1]
    return (takes is True and not nxt.startswith("--")) or not _is_flag(nxt)


def _flag_tokens(name: str, value: str | None) -> list[str]:
    return [name] if value is None else [name, value]
