"""The lines of a whole Recording's samples and load, from its columns, in bounded chunks.

`write_trace` used to turn every sample into a `Sample` with a dict and one
`json.dumps`: three quarters of `bubblewatch simulate`'s time. Here the rows
are put in file order with one `lexsort` over the columns (time, then load
before samples, then GPU), and each chunk of rows is formatted with one
`%` template per GPU: the same text `json.dumps` gives (floats rounded to 6
decimals and written with `repr`, the bitmask as an integer), the same
order. A sample with a missing (non-finite) value leaves that metric out,
exactly as `TraceWriter.sample` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import numpy as np

from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording

DEFAULT_CHUNK_ROWS = 65_536


def sample_and_load_lines(
    recording: Recording, chunk_rows: int | None = None
) -> Iterator[tuple[str, int]]:
    """(text, number of lines) chunk by chunk, in the order the record-by-record writer used."""
    chunk_rows = chunk_rows or DEFAULT_CHUNK_ROWS
    series = [s for s in recording.series.values() if len(s)]
    load = recording.load
    t = np.concatenate([s.t_s for s in series] + [load.t_s])
    gpu = np.concatenate(
        [np.full(len(s), s.gpu, dtype=np.int64) for s in series]
        + [np.full(len(load), -1, dtype=np.int64)]
    )
    row = np.concatenate(
        [np.arange(len(s), dtype=np.int64) for s in series] + [np.arange(len(load))]
    )
    kind = np.concatenate(
        [np.ones(t.size - len(load), dtype=np.int8), np.zeros(len(load), np.int8)]
    )
    # Time, then a load before the samples of its instant, then GPU and row.
    order = np.lexsort((row, gpu, kind, t))
    formats = {s.gpu: _SampleFormat(s) for s in series}
    for lo in range(0, order.size, chunk_rows):
        part = order[lo : lo + chunk_rows]
        lines: list[str] = [""] * part.size
        g_part = gpu[part]
        for g in np.unique(g_part):
            where = np.flatnonzero(g_part == g)
            rows = row[part[where]]
            text = _load_lines(recording, rows) if g < 0 else formats[int(g)].lines(rows)
            for k, line in zip(where.tolist(), text, strict=True):
                lines[k] = line
        yield "".join(lines), part.size


class _SampleFormat:
    """One GPU's sample lines: a template for rows with every value, json for the rest."""

    def __init__(self, s: GpuSeries) -> None:
        self.s = s
        self.metrics = list(s.values)
        cells = [
            f'"{m.value}":%d' if m is Metric.CLOCKS_EVENT_REASONS else f'"{m.value}":%r'
            for m in self.metrics
        ]
        head = f'{{"type":"sample","t":%r,"gpu":{s.gpu}'
        self.template = head + "".join("," + c for c in cells) + "}\n"

    def lines(self, rows: np.ndarray) -> list[str]:
        s = self.s
        t = s.t_s[rows].tolist()
        if not self.metrics:
            return [self.template % (round(x, 6),) for x in t]
        values = np.stack([s.values[m][rows] for m in self.metrics], axis=1)
        whole = np.isfinite(values).all(axis=1).tolist()
        out = []
        for ti, vals, ok in zip(t, values.tolist(), whole, strict=True):
            if ok:
                out.append(self.template % (round(ti, 6), *[round(v, 6) for v in vals]))
            else:
                out.append(self._partial(ti, vals))
        return out

    def _partial(self, t: float, vals: list[float]) -> str:
        rec: dict[str, object] = {"type": "sample", "t": round(t, 6), "gpu": self.s.gpu}
        for m, v in zip(self.metrics, vals, strict=True):
            if math.isfinite(v):
                rec[m.value] = int(v) if m is Metric.CLOCKS_EVENT_REASONS else round(v, 6)
        return json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n"


def _load_lines(recording: Recording, rows: np.ndarray) -> list[str]:
    load = recording.load
    out = []
    for t, r, q, mb in zip(
        load.t_s[rows].tolist(),
        load.running[rows].tolist(),
        load.queued[rows].tolist(),
        load.micro_batch_or_nan()[rows].tolist(),
        strict=True,
    ):
        rec: dict[str, object] = {
            "type": "load",
            "t": round(t, 6),
            "running": r if math.isfinite(r) else None,
            "queued": q if math.isfinite(q) else None,
        }
        if math.isfinite(mb):
            rec["micro_batch"] = mb
        out.append(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n")
    return out
