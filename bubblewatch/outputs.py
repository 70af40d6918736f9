"""Output files written whole or not at all.

Every path is checked before any work (its directory exists and is
writable), each file is written to a temporary file beside it and renamed
over it only when all of them are written: a missing directory, a full disk
or an interrupted run leaves no partial report, picture or trace behind, and
the error names the file (InputError, exit status 2). Streaming recorders
(`record`, `run --record`) keep what they flushed instead, by design of the
trace format.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bubblewatch.errors import InputError

PathLike = str | os.PathLike[str]


def check_writable(path: PathLike) -> None:
    """InputError unless a file can be created at `path` (its directory exists, is writable)."""
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        raise InputError("cannot write: is a directory", path=str(p))
    if not parent.is_dir():
        raise InputError(f"cannot write: no such directory {str(parent)!r}", path=str(p))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write: directory {str(parent)!r} is not writable", path=str(p))


def _temporary(p: Path, n: int) -> Path:
    # Same directory (rename stays on one filesystem), same suffix (.gz decides gzip).
    return p.with_name(f".{p.name}.{os.getpid()}-{n}.tmp{p.suffix}")


@contextlib.contextmanager
def replacing(paths: Sequence[PathLike]) -> Iterator[list[Path]]:
    """Temporary paths to write `paths` to; renamed over them when the block succeeds.

    On any error (or an interrupt) the temporaries are removed and the
    targets left as they were; an OSError becomes an InputError naming the
    file it was about.
    """
    targets = [Path(p) for p in paths]
    for t in targets:
        check_writable(t)
    temps = [_temporary(t, i) for i, t in enumerate(targets)]
    try:
        try:
            yield temps
        except OSError as e:
            where = str(e.filename) if getattr(e, "filename", None) else str(targets[0])
            for t, tmp in zip(targets, temps, strict=True):
                if where == str(tmp):
                    where = str(t)
            raise InputError(f"cannot write: {e.strerror or e}", path=where) from None
        for t, tmp in zip(targets, temps, strict=True):
            try:
                os.replace(tmp, t)
            except OSError as e:
                raise InputError(f"cannot write: {e.strerror or e}", path=str(t)) from None
    finally:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
