"""A long recording as a stream: pieces laid end to end, and cut again into time windows.

Readers yield a recording in pieces of a bounded number of samples, in file
order (`TraceReader.pieces`, the importers' `pieces`). `concat` lays pieces
end to end (each GPU's rows put in time order, rows of one instant in the
order they came); `windows` turns a stream of pieces into consecutive
windows of at most `length_s` seconds and about `max_samples` samples each,
holding no more than a window and a piece at a time. A row that arrives
after its window was handed on (a file not quite in time order) goes into
the next window rather than being lost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from bubblewatch.model.column_parts import merge_parts
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import GpuSeries, LoadSeries, Recording


def concat(pieces: Sequence[Recording]) -> Recording:
    """Pieces of one recording as one: GPUs, rows, load and events; the last piece's meta."""
    if len(pieces) == 1:
        return pieces[0]
    gpus: dict[int, GpuInfo] = {}
    for p in pieces:  # a later piece knows as much of a GPU as an earlier one, or more
        gpus.update((info.index, info) for info in p.gpus)
    series: dict[int, GpuSeries] = {}
    for g in sorted({g for p in pieces for g in p.series}):
        parts = [(p.series[g].t_s, p.series[g].values) for p in pieces if g in p.series]
        t, values = merge_parts(parts)
        series[g] = GpuSeries(g, t, values)
    load = LoadSeries.concat(p.load for p in pieces)
    events = tuple(sorted((e for p in pieces for e in p.events), key=lambda e: e.t_s))
    last = pieces[-1]
    return Recording(
        gpus=tuple(gpus[g] for g in sorted(gpus)),
        series=series,
        topology=last.topology,
        load=load,
        events=events,
        meta=dict(last.meta),
    )


def windows(
    pieces: Iterable[Recording], *, length_s: float, max_samples: int
) -> Iterator[Recording]:
    """Consecutive windows of the stream, from its first sample on.

    The length is `length_s`, or shorter where the first piece's rate of
    samples would put more than `max_samples` in one. Windows without
    samples (a gap in the recording) are skipped; the last window holds what
    is left, and the stream's final meta (it may hold no samples).
    """
    held: list[Recording] = []
    start: float | None = None
    length = length_s
    newest = -math.inf
    for piece in pieces:
        held.append(piece)
        if piece.n_samples == 0:
            continue
        if start is None:
            start = piece.start_s
            length = _length(piece, length_s, max_samples)
        newest = max(newest, piece.end_s)
        while newest >= start + length:
            end = start + length
            # Views of the pieces: a piece is let go once all its rows have been handed on.
            out = concat([p.window(-math.inf, end) for p in held])
            held = [r for r in (p.window(end, math.inf) for p in held) if _holds(r)]
            if out.n_samples:
                yield out
            first = min((r.start_s for r in held if r.n_samples), default=end)
            start = max(end, _aligned(first, end, length))
    if held:
        yield concat(held)  # what is left, and the stream's final meta


def _holds(rec: Recording) -> bool:
    return rec.n_samples > 0 or len(rec.load) > 0 or bool(rec.events)


def _length(piece: Recording, length_s: float, max_samples: int) -> float:
    rate = piece.n_samples / max(piece.duration_s, 1e-9)
    return float(min(length_s, max(max_samples / rate, 1e-3)))


def _aligned(t: float, origin: float, length: float) -> float:
    """The start of the window (origin + k * length) that holds time t."""
    return origin + math.floor((t - origin) / length) * length
