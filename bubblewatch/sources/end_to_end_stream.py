"""The files of a directory or glob as one recording, piece by piece (bounded memory).

What `end_to_end.read_joined` does with whole files, done a piece at a time:
the files are put in time order by their first samples (a first block of
each is read to tell), checked to come from one host and one set of GPUs,
and their pieces passed on file after file. A file whose rows reach back into
the previous file's time (the driver's buffered rows at a rotation) is
fine; a GPU with a row at the same instant in both files is refused with
the two files named, as `read_joined` refuses it. The last piece carries the
joined meta: every file's span and sample count, the gaps between files,
and a topology change where a file's header says the topology changed while
nothing was recorded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording
from bubblewatch.model.samples import Event
from bubblewatch.model.topology import Topology
from bubblewatch.sources.end_to_end import (
    PART_KEYS,
    FileSpan,
    check_same_source,
    joined_meta,
    skip_empty,
    start_key,
    with_skipped,
)

FloatArray = npt.NDArray[np.float64]


@dataclass
class _File:
    """What is known of one file while its pieces pass."""

    name: str
    start_s: float = math.nan
    end_s: float = math.nan
    samples: int = 0
    truncated: bool = False
    interval_s: float = math.nan
    last_t: dict[int, FloatArray] = field(default_factory=dict)  # each GPU's last piece's times
    topology: Topology | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def joined_pieces(
    files: Sequence[str],
    pieces_of: Callable[[str], Iterator[Recording]],
    *,
    probe: Callable[[str], Recording] | None = None,
) -> Iterator[Recording]:
    """The files' pieces in time order; `probe(file)` reads the start of one (a first piece).

    Empty files are skipped (`skip_empty`); the last piece's meta lists them.
    """
    files, skipped = skip_empty(files)
    if len(files) == 1:
        for one in pieces_of(files[0]):
            yield with_skipped(one, skipped)
        return
    first = probe or (lambda f: next(pieces_of(f)))
    heads = [(f, first(f)) for f in files]
    check_same_source(heads)
    order = [f for f, _ in sorted(heads, key=lambda h: start_key(h[1]))]
    del heads
    done: list[_File] = []
    prev: _File | None = None
    piece: Recording | None = None
    for name in order:
        info = _File(name)
        opened = False
        for read in pieces_of(name):
            piece = read
            if not opened:
                opened = True
                info.topology = piece.topology
                piece = _topology_change(prev, piece)
            _check_late_rows(prev, info, piece)
            _note(info, piece)
            yield replace(piece, meta=_meta(done, piece))
        info.meta = dict(piece.meta) if piece is not None else {}
        done.append(info)
        prev = info
    if piece is not None:
        end = replace(piece.window(math.inf, math.inf), meta=_joined_meta(done))
        yield with_skipped(end, skipped)


def _topology_change(prev: _File | None, piece: Recording) -> Recording:
    """A file whose header gives another topology than the last file's had: an event."""
    if prev is None or prev.topology == piece.topology or not math.isfinite(piece.start_s):
        return piece
    if any(e.kind == "topology_change" for e in piece.events):
        return piece
    raw = None if piece.topology is None else piece.topology.to_dict()
    ev = Event(piece.start_s, "topology_change", None, {"topology": raw})
    return replace(piece, events=(ev, *piece.events))


def _check_late_rows(prev: _File | None, info: _File, piece: Recording) -> None:
    """A GPU's row at an instant the previous file also has: the same recording twice."""
    if prev is None:
        return
    for g, s in piece.series.items():
        before = prev.last_t.get(g)
        if before is None or not len(s) or s.t_s[0] > before[-1]:
            continue
        early = s.t_s[s.t_s <= before[-1]]
        if early[0] < before[0]:  # reaches further back than what is kept of the last file
            raise InputError(
                f"GPU {g} has samples from {early[0]:.6f} on, inside the time of "
                f"{prev.name}: files that overlap in time are read whole; the "
                "recording is too long for that (give the files one by one)",
                path=info.name,
            )
        same = np.intersect1d(early, before)
        if same.size:
            raise InputError(
                f"GPU {g} has a sample at t={same[0]:.6f} in both this file and "
                f"{prev.name}: the same recording given twice, or two recordings "
                "made at the same time",
                path=info.name,
            )


def _note(info: _File, piece: Recording) -> None:
    if piece.n_samples:
        info.start_s = float(np.fmin(info.start_s, piece.start_s))
        info.end_s = float(np.fmax(info.end_s, piece.end_s))
        info.samples += piece.n_samples
        if not math.isfinite(info.interval_s):
            steps = [np.diff(s.t_s) for s in piece.series.values() if len(s) > 1]
            if steps:
                info.interval_s = float(np.median(np.concatenate(steps)))
        info.last_t = {g: s.t_s for g, s in piece.series.items() if len(s)}
    info.truncated = info.truncated or bool(piece.meta.get("truncated", False))


def _meta(done: list[_File], piece: Recording) -> dict[str, Any]:
    """A piece's meta: the first file's, less what describes one part of a rotation."""
    first = done[0].meta if done else piece.meta
    return {k: v for k, v in first.items() if k not in PART_KEYS}


def _joined_meta(done: list[_File]) -> dict[str, Any]:
    spans = [
        FileSpan(f.name, f.start_s, f.end_s, f.samples, f.truncated, f.interval_s) for f in done
    ]
    return joined_meta(done[0].meta, spans)
