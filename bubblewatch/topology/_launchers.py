"""Which serving engine a command line launches, and where the engine's own arguments start.

Looks through shell environment assignments (`HF_TOKEN=... python ...`),
`env VAR=... `, `nohup` and the engines' own wrappers (`trtllm-llmapi-launch`) and
the python interpreter's options to the module (`python -m sglang.launch_server`)
or entry point (`vllm serve`, `trtllm-serve`): each engine's `Launcher`s
(bubblewatch.engines). Parsing the arguments is left to
bubblewatch.topology._tokenise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bubblewatch import engines
from bubblewatch.topology.redact import ASSIGNMENT

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_PYTHON_OPTS_WITH_ARG = frozenset({"-X", "-W", "-Q"})
_WRAPPERS = frozenset({"nohup", "exec"})


@dataclass(frozen=True)
class Launch:
    engine: str
    args: tuple[str, ...]  # the engine's own arguments (after the subcommand)
    prefix_env: dict[str, str]


def recognise(argv: Sequence[str]) -> Launch | None:
    """Find the engine and where its own arguments start, skipping python and wrappers."""
    args = list(argv)
    prefix_env: dict[str, str] = {}
    while args:
        if ASSIGNMENT.match(args[0]):
            # `VAR=value cmd ...`: the shell's way to set the command's environment.
            k, _, v = args[0].partition("=")
            prefix_env[k] = v
            args = args[1:]
            continue
        prog = os.path.basename(args[0])
        if prog == "env":
            args = args[1:]
            while args and ("=" in args[0] and not args[0].startswith("-")):
                k, _, v = args[0].partition("=")
                prefix_env[k] = v
                args = args[1:]
            continue
        if prog in _WRAPPERS or any(prog in e.command.wrappers for e in engines.all_engines()):
            args = args[1:]
            continue
        break
    if not args:
        return None
    prog = os.path.basename(args[0])
    rest = args[1:]
    if _PYTHON.match(prog):
        i = 0
        while i < len(rest):
            a = rest[i]
            if a == "-m" and i + 1 < len(rest):
                return _by_module(rest[i + 1], rest[i + 2 :], prefix_env)
            if a.startswith("-m") and len(a) > 2:
                return _by_module(a[2:], rest[i + 1 :], prefix_env)
            if a in _PYTHON_OPTS_WITH_ARG:
                i += 2
                continue
            if a == "-c" or not a.startswith("-"):
                if a == "-c":
                    return None
                # `python /usr/bin/vllm serve ...`: the script is the entry point.
                return _by_entry_point(os.path.basename(a), rest[i + 1 :], prefix_env)
            i += 1
        return None
    return _by_entry_point(prog, rest, prefix_env)


def _by_module(module: str, rest: list[str], env: dict[str, str]) -> Launch | None:
    return _launch(module, True, rest, env)


def _by_entry_point(prog: str, rest: list[str], env: dict[str, str]) -> Launch | None:
    return _launch(prog, False, rest, env)


def _launch(name: str, module: bool, rest: list[str], env: dict[str, str]) -> Launch | None:
    """The launch of the first known engine with a launcher `name` that `rest` fits."""
    for engine in engines.all_engines():
        for launcher in engine.command.launchers:
            if launcher.name != name or launcher.module != module:
                continue
            sub = launcher.subcommand
            if sub is None:
                return Launch(engine.name, tuple(rest), env)
            if rest[:1] == [sub]:
                return Launch(engine.name, tuple(rest[1:]), env)
            if launcher.subcommand_optional:
                return Launch(engine.name, tuple(rest), env)
    return None


def detect_engine(argv: Sequence[str]) -> str | None:
    """The engine a command line launches (its name in bubblewatch.engines), or None."""
    launch = recognise(argv)
    return None if launch is None else launch.engine
