"""Split an engine's own arguments into flags and positionals by argparse/click rules.

`--flag value`, `--flag=value`, aliases, the last occurrence wins, `--no-X`
for vLLM's negatable booleans, and vLLM's compilation config in all its
spellings (-O3, -O 0, -cc.cudagraph_mode=NONE, --compilation-config JSON).
Unknown flags are kept as text. Values are not converted here: the caller
(bubblewatch.topology.cmdline) reads them with errors naming the flag.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from bubblewatch.sources.errors import InputError
from bubblewatch.topology._flags import TABLES, VLLM_CC_FLAGS


class EngineArgsError(InputError):
    """An engine flag or variable with a value the engine itself would reject."""


@dataclass
class Parsed:
    values: dict[str, str | bool]
    flags: dict[str, str | bool]
    positionals: list[str]
    compilation: dict[str, object]
    opt_level: int | None = None


def _parse_vllm_compilation(name: str, value: str | None, parsed: Parsed, where: str) -> bool:
    """Handle -O/-cc/--compilation-config in all spellings; False if `name` is not one."""
    for base in VLLM_CC_FLAGS:
        if name == base:
            break
        if name.startswith(base + "."):
            if value is None:
                raise EngineArgsError(f"{name} expects a value", path=where, field=name)
            parsed.compilation[name[len(base) + 1 :]] = value
            parsed.flags[name] = value
            return True
        if base == "-O" and len(name) == 3 and name[2].isdigit() and name.startswith("-O"):
            parsed.opt_level = int(name[2])
            parsed.flags["-O"] = name[2]
            return True
    else:
        return False
    if value is None:
        raise EngineArgsError(f"{name} expects a value", path=where, field=name)
    parsed.flags["--compilation-config" if name != "-O" else "-O"] = value
    text = value.strip()
    if name == "-O" and text.isdigit():
        parsed.opt_level = int(text)
        return True
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise EngineArgsError(
            f"{name} expects JSON (or -O0..-O3), got {value!r}: {e.msg}", path=where, field=name
        ) from e
    if not isinstance(obj, dict):
        raise EngineArgsError(
            f"{name} expects a JSON object, got {value!r}", path=where, field=name
        )
    parsed.compilation.update(obj)
    return True


def tokenise(engine: str, args: Sequence[str], where: str) -> Parsed:
    """The engine's arguments as the engine's own parser would split them."""
    table = TABLES[engine]
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
        if engine == "vllm":
            takes_next = value is None and nxt is not None and not _is_option(nxt)
            if _parse_vllm_compilation(
                name, value if eq else (nxt if takes_next else None), parsed, where
            ):
                is_level = name.startswith("-O") and len(name) == 3 and name[2].isdigit()
                i += 1 if (eq or is_level) else 2
                continue
        opt = table.get(name)
        negated = False
        if opt is None and name.startswith("--no-"):
            cand = table.get("--" + name[5:])
            if cand is not None and cand.negatable:
                opt, negated = cand, True
        if opt is None:
            if eq:
                parsed.flags[name] = inline
            elif nxt is not None and not _is_option(nxt):
                parsed.flags[name] = nxt
                i += 1
            else:
                parsed.flags[name] = True
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
