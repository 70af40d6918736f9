"""Split an engine's own arguments into flags and positionals by its parser's rules.

`--flag value`, `--flag=value`, aliases, the last occurrence wins, `--no-X`
for negatable booleans, and, with the engine version's flag table
(bubblewatch.engines.flagtable), argparse's unique-prefix abbreviations
(`--tp 8` is SGLang's `--tp-size 8`; an ambiguous prefix is noted as a
problem, since the engine would refuse it) and which unknown flags take a
value. vLLM's parser (its releases' rules: bubblewatch.engines.vllm.flags) also
reads `--flag_name` as `--flag-name`, `-O3`,
`-O 3` and `-O=3` as `--optimization-level 3`, and its compilation config in
all spellings (`-cc.cudagraph_mode=NONE`, `--compilation-config JSON`).
Values are not converted here: the caller (bubblewatch.topology.cmdline)
reads them with errors naming the flag.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bubblewatch.engines.base import Engine, Opt
from bubblewatch.engines.flagtable import FlagSpec, FlagTable
from bubblewatch.engines.versions import version_key
from bubblewatch.engines.vllm.flags import CC_KEYS_FROM as _CC_KEYS_FROM
from bubblewatch.engines.vllm.flags import FIRST_DOTTED as _FIRST_DOTTED
from bubblewatch.engines.vllm.flags import LAST_DOTTED_O as _LAST_DOTTED_O
from bubblewatch.errors import InputError
from bubblewatch.limits import decimal

_MAX_OPT_LEVEL = 999  # vLLM has -O0..-O3; a longer number is not a level


class EngineArgsError(InputError):
    """An engine flag or variable with a value the engine itself would reject."""


@dataclass
class Parsed:
    values: dict[str, str | bool]
    flags: dict[str, str | bool]
    positionals: list[str]
    compilation: dict[str, object]
    opt_level: int | None = None
    # Flag spellings as they appear in argv, by the canonical name they were read as.
    spelled: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


_VLLM_NAME = re.compile(r"(?<=--)[^.]*")
_OPT_LEVEL = re.compile(r"^-O=?(?P<level>.+)$")


def _vllm_name(name: str) -> str:
    """vLLM's FlexibleArgumentParser reads `_` as `-` in a long flag's name (before any `.`)."""
    if name.startswith("--"):
        return _VLLM_NAME.sub(lambda m: m.group(0).replace("_", "-"), name, count=1)
    return name


def _check_vllm_spelling(
    spelled: str, base: str, rewritten: bool, table: FlagTable | None, parsed: Parsed
) -> None:
    """Note a problem when the release's parser does not take this -O/-cc spelling.

    `spelled` is the argument as written (no value), `base` the flag it belongs to;
    `rewritten`: an `-O` that vLLM 0.12+ rewrites to `--optimization-level` before
    parsing (`-O<x>`, `-O=<x>`, `-O <0-3>`: vllm/utils/argparse_utils.py); older
    releases have `-O` as a compilation-config flag. 0.12 still rewrote the dotted
    `-O.key=v` to `-cc.key=v` (deprecated, "removed in v0.13.0"); 0.15.1 and later
    read it as `--optimization-level .key=v`, which is no level.
    """
    if table is None:
        return
    dotted = spelled.startswith(base + ".") or (base == "-O" and spelled.startswith("-O."))
    if dotted and version_key(table.table_version) < version_key(_FIRST_DOTTED):
        parsed.problems.append(
            f"{table.engine} {table.version} has no dotted {base}.key=value syntax ({spelled}): "
            f"pass {base} JSON"
        )
        return
    if base == "-O" and not table.resolve("-O").ok:
        if spelled.startswith("-O."):
            if version_key(table.table_version) > version_key(_LAST_DOTTED_O):
                parsed.problems.append(
                    f"{table.engine} {table.version} reads {spelled} as --optimization-level "
                    f"{spelled[2:]}, which is no level: use -cc{spelled[2:]}"
                )
                return
            base = "-cc"
        elif rewritten:
            base = "--optimization-level"
    res = table.resolve(base)
    if res.problem:
        parsed.problems.append(res.problem if spelled == base else f"{res.problem} ({spelled})")


def _check_vllm_cc_keys(keys: Sequence[str], table: FlagTable | None, parsed: Parsed) -> None:
    """Note a compilation-config key (`cudagraph_mode`) older than the release."""
    if table is None:
        return
    for key in keys:
        first = _CC_KEYS_FROM.get(key)
        if first is not None and version_key(table.table_version) < version_key(first):
            parsed.problems.append(
                f"{table.engine} {table.version}'s compilation config has no {key} "
                f"(first in {first})"
            )


def _parse_vllm_compilation(
    name: str,
    value: str | None,
    parsed: Parsed,
    where: str,
    table: FlagTable | None = None,
    *,
    cc_flags: Sequence[str] = (),
    attached: bool = False,
) -> bool:
    """Handle -O/-cc/--compilation-config/--optimization-level; False if `name` is not one.

    `attached`: the value was written into the argument (`-O3`, `-O=3`).
    """
    if name == "--optimization-level":
        if value is None:
            raise EngineArgsError(f"{name} expects a value", path=where, field=name)
        _check_vllm_spelling(name, name, False, table, parsed)
        parsed.flags["--optimization-level"] = value
        level = decimal(value.strip(), _MAX_OPT_LEVEL)
        if level is not None:
            parsed.opt_level = level
        return True
    for base in cc_flags:
        if name == base:
            break
        if name.startswith(base + "."):
            if value is None:
                raise EngineArgsError(f"{name} expects a value", path=where, field=name)
            _check_vllm_spelling(name, base, False, table, parsed)
            _check_vllm_cc_keys((name[len(base) + 1 :].split(".", 1)[0],), table, parsed)
            parsed.compilation[name[len(base) + 1 :]] = value
            parsed.flags[name] = value
            return True
    else:
        return False
    if value is None:
        raise EngineArgsError(f"{name} expects a value", path=where, field=name)
    text = value.strip()
    level = decimal(text, _MAX_OPT_LEVEL) if name == "-O" else None
    rewritten = name == "-O" and (attached or value in ("0", "1", "2", "3"))
    _check_vllm_spelling(name, name, rewritten, table, parsed)
    if level is not None:
        # -O3 / -O 3: an optimisation level (vLLM 0.12+), a compilation level before.
        parsed.opt_level = level
        parsed.flags["-O"] = text
        return True
    parsed.flags["--compilation-config" if name != "-O" else "-O"] = value
    try:
        obj = json.loads(text)
    except ValueError as e:  # JSONDecodeError, or an integer past Python's digit limit
        why = e.msg if isinstance(e, json.JSONDecodeError) else "a number too long"
        raise EngineArgsError(
            f"{name} expects JSON (or -O0..-O3), got {reprlib.repr(value)}: {why}",
            path=where,
            field=name,
        ) from None
    if not isinstance(obj, dict):
        raise EngineArgsError(
            f"{name} expects a JSON object, got {value!r}", path=where, field=name
        )
    _check_vllm_cc_keys(tuple(obj), table, parsed)
    parsed.compilation.update(obj)
    if "level" in obj and isinstance(obj["level"], int) and "cudagraph_mode" not in obj:
        parsed.opt_level = obj["level"]
    return True


def _lookup(
    name: str, table: FlagTable | None, hand: Mapping[str, Opt], parsed: Parsed
) -> tuple[Opt | None, FlagSpec | None, bool, str]:
    """The flag `name` is read as: our option (if we read it), its spec, negated, canonical name."""
    opt = hand.get(name)
    negated = False
    if opt is None and name.startswith("--no-"):
        cand = hand.get("--" + name[5:])
        if cand is not None and cand.negatable:
            opt, negated = cand, True
    if opt is not None:
        spec = None
        if table is not None:
            res = table.resolve(name)
            spec = res.spec
            if res.problem:
                parsed.problems.append(res.problem)
        return opt, spec, negated, opt.flag
    if table is None:
        return None, None, False, name
    res = table.resolve(name)
    if res.spec is None:
        if res.problem and "ambiguous" in res.problem:
            parsed.problems.append(res.problem)
        return None, None, False, name
    if res.problem:
        parsed.problems.append(res.problem)
    spec = res.spec
    for alias in table.spellings(spec.dest):
        if alias in hand:
            negated = spec.name.startswith("--no-") and not alias.startswith("--no-")
            return hand[alias], spec, negated, hand[alias].flag
    return None, spec, False, spec.name


def _compilation_words(
    arg: str,
    name: str,
    value: str | None,
    nxt: str | None,
    parsed: Parsed,
    where: str,
    table: FlagTable | None,
    cc_flags: Sequence[str],
) -> int:
    """How many words a vLLM optimisation level or compilation flag takes (0: not one)."""
    level = _OPT_LEVEL.match(arg)
    if level and not arg.startswith(("-O.", "-O ")) and arg != "-O":
        _parse_vllm_compilation(
            "-O", level["level"], parsed, where, table, cc_flags=cc_flags, attached=True
        )
        parsed.spelled["-O"] = arg
        return 1
    takes_next = value is None and nxt is not None and not _is_option(nxt)
    if _parse_vllm_compilation(
        name,
        value if value is not None else (nxt if takes_next else None),
        parsed,
        where,
        table,
        cc_flags=cc_flags,
    ):
        parsed.spelled[name] = arg
        return 1 if value is not None else 2
    return 0


def tokenise(
    engine: Engine, args: Sequence[str], where: str, table: FlagTable | None = None
) -> Parsed:
    """The engine's arguments as the engine's own parser would split them.

    An engine with `compilation_flags` (vLLM) has its parser's rewrites applied:
    `_` for `-` in long names, `-O3` and the compilation config's spellings.
    """
    hand = engine.command.options
    cc_flags = engine.command.compilation_flags
    parsed = Parsed(values={}, flags={}, positionals=[], compilation={})
    i = 0
    while i < len(args):
        arg = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == "--":
            parsed.positionals.extend(args[i + 1 :])
            break
        if not arg.startswith("-") or arg == "-" or _is_number(arg):
            parsed.positionals.append(arg)
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        value: str | None = inline if eq else None
        if engine.command.underscores_as_dashes:
            name = _vllm_name(name)
        if cc_flags:
            used = _compilation_words(arg, name, value, nxt, parsed, where, table, cc_flags)
            if used:
                i += used
                continue
        opt, spec, negated, canon = _lookup(name, table, hand, parsed)
        parsed.spelled[canon] = name
        if opt is None:
            bare = spec is not None and not spec.takes_value
            if eq:
                parsed.flags[canon] = inline
            elif (
                not bare
                and nxt is not None
                and (
                    (spec is not None and spec.nargs == "1" and not nxt.startswith("--"))
                    or not _is_option(nxt)
                )
            ):
                parsed.flags[canon] = nxt
                i += 1
            else:
                parsed.flags[canon] = True
            i += 1
            continue
        if opt.kind == "bool":
            flag_value = not negated
            if eq:
                flag_value = _parse_bool(inline, name, where)
            parsed.values[opt.dest] = flag_value
            parsed.flags[opt.flag] = flag_value
            i += 1
            continue
        if value is None:
            # A flag that takes one value takes the next word, unless it is a long option.
            if nxt is None or nxt.startswith("--"):
                raise EngineArgsError(f"{name} expects a value", path=where, field=name)
            value = nxt
            i += 1
        parsed.values[opt.dest] = value
        parsed.flags[opt.flag] = value
        i += 1
    return parsed


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _is_option(s: str) -> bool:
    return s.startswith("-") and s != "-" and not _is_number(s)


def _parse_bool(text: str, name: str, where: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise EngineArgsError(f"{name} expects a boolean, got {text!r}", path=where, field=name)
