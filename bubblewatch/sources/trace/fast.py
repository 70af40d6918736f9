"""The trace reader's fast path: a block of record lines to columns, or None when in doubt.

Lines are decoded with orjson, grouped by their keys, and each group of
`sample` (or `load`) records is checked and converted a column at a time with
numpy: the same checks `records` makes record by record (types, finite
values, each metric's range, the bitmask an integer). The fast path accepts
only what the record-by-record path accepts and gives the same values; on
anything else (a line orjson refuses, an integer longer than the bound, an
unknown key, a bad value, nesting) it returns None and the reader takes the
block again record by record, which finds the first bad line and names it.
Records of other kinds (events, topology changes, summaries, extensions) are
left to that path too, by index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from bubblewatch.limits import MAX_GPU_INDEX, MAX_INT_DIGITS
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.importers._fastcsv import metric_ok

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_METRIC_KEYS = {m.value: m for m in Metric}
_SAMPLE_KEYS = ("t", "gpu")
_LOAD_KEYS = frozenset({"type", "t", "running", "queued", "micro_batch"})
_NUMBERS = frozenset({int, float})
_NUMBERS_OR_NULL = frozenset({int, float, type(None)})
_SCALARS = frozenset({int, float, str, bool, type(None)})
_MAX_GPU = MAX_GPU_INDEX + 1  # beyond: the record path names the line
# A run of digits longer than the integer bound: the record path refuses such integers.
_DIGIT_RUN = b"0" * (MAX_INT_DIGITS + 1)
_DIGITS_AS_ZERO = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))


@dataclass
class FastBlock:
    """Columns of a block's samples (per GPU, file order) and load rows, and what is left."""

    samples: dict[int, tuple[FloatArray, dict[Metric, FloatArray]]] = field(default_factory=dict)
    load: tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None = None
    others: list[int] = field(default_factory=list)  # indices of lines for the record path


def parse_block(lines: list[bytes], data: bytes) -> FastBlock | None:
    """The block's sample and load records as columns; None: read it record by record.

    `lines` are the block's lines (no blank ones), `data` their text (for the
    integer bound).
    """
    if _DIGIT_RUN in data.translate(_DIGITS_AS_ZERO):
        return None
    try:
        recs = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        return None
    if set(map(type, recs)) - {dict}:
        return None
    groups = _groups(recs)
    out = FastBlock()
    sample_parts: list[tuple[IntArray, FloatArray, FloatArray, list[str]]] = []
    load_parts: list[tuple[IntArray, FloatArray]] = []
    for keys, idx in groups.items():
        members = recs if len(groups) == 1 else [recs[i] for i in idx.tolist()]
        kind = _kind(keys, members)
        if kind == "sample":
            part = _samples(keys, members)
            if part is None:
                return None
            sample_parts.append((idx, *part))
        elif kind == "load":
            rows = _load(keys, members)
            if rows is None:
                return None
            load_parts.append((idx, rows))
        else:
            out.others.extend(idx.tolist())
    out.others.sort()
    out.samples = _per_gpu(sample_parts)
    out.load = _load_columns(load_parts)
    return out


def _groups(recs: list[dict[str, Any]]) -> dict[tuple[str, ...], IntArray]:
    """Indices of the records of each key sequence (the writer gives one per record kind)."""
    sigs = list(map(tuple, recs))
    kinds = dict.fromkeys(sigs)
    if len(kinds) == 1:
        return {sigs[0]: np.arange(len(recs))}
    number = {k: i for i, k in enumerate(kinds)}
    ids = np.fromiter(map(number.__getitem__, sigs), dtype=np.int64, count=len(sigs))
    return {k: np.flatnonzero(ids == i) for k, i in number.items()}


def _kind(keys: tuple[str, ...], members: list[dict[str, Any]]) -> str | None:
    if "type" not in keys:
        return None
    kinds = set(map(itemgetter("type"), members))
    if len(kinds) != 1:
        return None
    kind = next(iter(kinds))
    return kind if kind in ("sample", "load") else None


def _samples(
    keys: tuple[str, ...], members: list[dict[str, Any]]
) -> tuple[FloatArray, FloatArray, list[str]] | None:
    """(gpu, t and metric values as an (n, 1 + k) array, metric keys) or None."""
    metrics = [k for k in keys if k not in ("type", "t", "gpu") and not k.startswith("x_")]
    if any(k not in _METRIC_KEYS for k in metrics) or not all(k in keys for k in _SAMPLE_KEYS):
        return None
    if not _extensions_are_scalars(keys, members):
        return None
    gpus = list(map(itemgetter("gpu"), members))
    if set(map(type, gpus)) != {int}:
        return None
    rows = list(map(itemgetter("t", *metrics), members)) if metrics else None
    if rows is None:
        t_only = list(map(itemgetter("t"), members))
        if set(map(type, t_only)) - _NUMBERS:
            return None
        arr = np.array(t_only, dtype=np.float64)[:, None]
    else:
        if set(map(type, chain.from_iterable(rows))) - _NUMBERS_OR_NULL:
            return None
        arr = np.array(rows, dtype=np.float64)
    gpu = np.array(gpus, dtype=np.float64)
    if not bool(np.isfinite(arr[:, 0]).all()) or bool(((gpu < 0) | (gpu >= _MAX_GPU)).any()):
        return None
    for j, key in enumerate(metrics, start=1):
        metric = _METRIC_KEYS[key]
        whole = metric is Metric.CLOCKS_EVENT_REASONS
        if not metric_ok(metric, arr[:, j], integer=whole):
            return None
    return gpu, arr, metrics


def _extensions_are_scalars(keys: tuple[str, ...], members: list[dict[str, Any]]) -> bool:
    """x_ fields are skipped, but a nested one must meet the record path's depth check."""
    ext = [k for k in keys if k.startswith("x_")]
    return all(not set(map(type, map(itemgetter(k), members))) - _SCALARS for k in ext)


def _load(keys: tuple[str, ...], members: list[dict[str, Any]]) -> FloatArray | None:
    """(t, running, queued, micro_batch) rows as an (n, 4) array (NaN: null), or None."""
    if not set(keys) <= _LOAD_KEYS or "t" not in keys:
        return None
    cols = ("t", "running", "queued", "micro_batch")
    rows = [tuple(r.get(k) for k in cols) for r in members]
    if set(map(type, chain.from_iterable(rows))) - _NUMBERS_OR_NULL:
        return None
    arr = np.array(rows, dtype=np.float64)
    if not bool(np.isfinite(arr[:, 0]).all()) or bool(np.isinf(arr).any()):
        return None
    with np.errstate(invalid="ignore"):
        if bool((arr[:, 1:] < 0).any()):
            return None
    return arr


def _per_gpu(
    parts: list[tuple[IntArray, FloatArray, FloatArray, list[str]]],
) -> dict[int, tuple[FloatArray, dict[Metric, FloatArray]]]:
    """Each GPU's rows in file order: times and the metrics it reported in this block."""
    out: dict[int, tuple[FloatArray, dict[Metric, FloatArray]]] = {}
    if not parts:
        return out
    all_gpus = np.unique(np.concatenate([p[1] for p in parts])).astype(np.int64)
    for g in all_gpus.tolist():
        pieces = []
        for idx, gpu, arr, metrics in parts:
            sel = np.flatnonzero(gpu == g)
            if sel.size:
                pieces.append((idx[sel], arr[sel], metrics))
        out[g] = _gpu_columns(pieces)
    return out


def _gpu_columns(
    pieces: list[tuple[IntArray, FloatArray, list[str]]],
) -> tuple[FloatArray, dict[Metric, FloatArray]]:
    if len(pieces) == 1:
        _, arr, metrics = pieces[0]
        cols = np.ascontiguousarray(arr.T)
        values = {_METRIC_KEYS[k]: cols[j] for j, k in enumerate(metrics, start=1)}
        return cols[0], {m: v for m, v in values.items() if bool(np.isfinite(v).any())}
    idx = np.concatenate([p[0] for p in pieces])
    order = np.argsort(idx, kind="stable")
    t = np.concatenate([p[1][:, 0] for p in pieces])[order]
    names = sorted({k for p in pieces for k in p[2]})
    values = {}
    for k in names:
        col = np.concatenate(
            [
                p[1][:, p[2].index(k) + 1] if k in p[2] else np.full(len(p[0]), np.nan)
                for p in pieces
            ]
        )[order]
        if bool(np.isfinite(col).any()):
            values[_METRIC_KEYS[k]] = col
    return t, values


def _load_columns(
    parts: list[tuple[IntArray, FloatArray]],
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None:
    """(t, running, queued, micro_batch) columns in file order."""
    if not parts:
        return None
    idx = np.concatenate([p[0] for p in parts])
    arr = np.concatenate([p[1] for p in parts])[np.argsort(idx, kind="stable")]
    cols = np.ascontiguousarray(arr.T)
    return cols[0], cols[1], cols[2], cols[3]
