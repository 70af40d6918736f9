"""A private per-user cache for what a rule set's load builds: CEL's parser, the checked set.

`celpy` builds its LALR parser from the grammar at the first compile: about
0.2 s, a third of a rule set's load (`bubblewatch analyze` pays it on every
run). Lark can keep the built tables in a file; they are kept in the user's
own cache directory (`$XDG_CACHE_HOME/bubblewatch`, else `~/.cache/bubblewatch`),
never in a shared temporary directory, because the file is a pickle: it is
used only when the directory belongs to this user and no one else can write
to it. Lark checks the grammar's digest (grammar and options) in the file and
rebuilds on any mismatch; the file name carries lark's and Python's versions.
Where no such directory can be had the parser is built as `celpy` builds it.

The checked rule set itself (YAML read, every expression parsed and checked:
about 0.3 s for the shipped set) is kept too, under a key that digests the
rule files' text and the source of the code that checks them (`read_cached`,
`write_cached`); a changed file or checker is a miss, and the set is built
again. `BUBBLEWATCH_CACHE_DIR` names another directory; set empty, it turns
the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import stat
import sys
from pathlib import Path
from typing import Any, TypeVar

import lark
from celpy.celparser import CELParser

CACHE_ENV = "BUBBLEWATCH_CACHE_DIR"

T = TypeVar("T")


def cache_dir() -> Path | None:
    """The user's private cache directory (created 0700), or None where it is not private."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit == "":
        return None  # BUBBLEWATCH_CACHE_DIR= turns the cache off
    if explicit:
        d = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        d = Path(base) / "bubblewatch"
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = d.lstat()
    except (OSError, RuntimeError):
        return None
    private = (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )
    return d if private else None


def install_cel_parser() -> None:
    """Give celpy its parser from the cache (built and saved there the first time)."""
    if CELParser.CEL_PARSER is not None:
        return
    d = cache_dir()
    if d is None:
        return  # celpy builds it at the first compile
    grammar = (
        Path(sys.modules[CELParser.__module__].__file__ or "").parent / "cel.lark"
    ).read_text()
    name = f"cel-lalr-lark{lark.__version__}-py{sys.version_info[0]}{sys.version_info[1]}.pickle"
    # The same options celpy passes (celpy.celparser.CELParser.__init__), plus the cache.
    CELParser.CEL_PARSER = lark.Lark(
        grammar,
        parser="lalr",
        start="expr",
        debug=True,
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        tree_class=lark.Tree,
        cache=str(d / name),
    )


def source_digest(*parts: bytes) -> str:
    """SHA-256 over `parts`, each length-prefixed (so no two lists of parts collide)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def read_cached(slot: str, key: str, kind: type[T]) -> T | None:
    """The object saved in `slot` under `key`, if it is a `kind`; None on any miss."""
    d = cache_dir()
    if d is None:
        return None
    try:
        with (d / f"{slot}.pickle").open("rb") as f:
            saved_key, obj = pickle.load(f)
    except Exception:  # a missing, torn or foreign file is a miss, whatever it raises
        return None
    return obj if saved_key == key and isinstance(obj, kind) else None


def write_cached(slot: str, key: str, obj: Any) -> None:
    """Save `obj` in `slot` (atomically, mode 0600); a failure leaves no cache, nothing else."""
    d = cache_dir()
    if d is None:
        return
    tmp = d / f".{slot}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump((key, obj), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"{slot}.pickle")
    except (OSError, pickle.PicklingError, RecursionError):
        with contextlib.suppress(OSError):
            tmp.unlink()
