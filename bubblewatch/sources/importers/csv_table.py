"""Importer for telemetry CSV files written by any logger: columns recognised by their names.

Layouts:
  long  a row per GPU per tick, with a GPU column (`gpu`, `index`, `gpu_id`,
        `uuid`, ...) and optionally a host column (GPUs of several hosts are
        numbered host by host, in order of appearance);
  wide  a row per tick, the GPU in each metric's header (`gpu0_power_w`,
        `power.draw [W] gpu 1`, `sm_active_3`);
  one   no GPU anywhere: one GPU, index 0.
Times: a time column as epoch seconds (ms, us, ns by magnitude), ISO 8601 or
nvidia-smi's `YYYY/MM/DD HH:MM:SS.mmm` (naive times in `ImportOptions.tz`);
without one, `ImportOptions.interval_s` (and `start_s`) rebuild them.
Recognised spellings are in `columns.ALIASES`; `ImportOptions.columns` maps
any other header (`power_avg_w=Watts,gpu=card,kernel_busy_ratio=busy@percent`).
Text columns nobody recognises (such as `phase`) become `annotation` events
where their value changes; unrecognised numeric columns are listed in
`meta["ignored_fields"]`.

The file is read into columns first, then each column is converted at once
(see csv_values), so a later columnar reader can replace the first step.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.limits import CSV_MAX_GPUS, LimitError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import FloatArray, GpuSeries, Recording
from bubblewatch.model.samples import Event
from bubblewatch.sources.importers import csv_values as cv
from bubblewatch.sources.importers._common import TextBlock, TextLines
from bubblewatch.sources.importers._pieces import by_gpu
from bubblewatch.sources.importers.column_roles import (
    GPU,
    HOST,
    NAME,
    POWER_LIMIT,
    TIME,
    UUID,
)
from bubblewatch.sources.importers.csv_header import Col, Table, header_columns, read_table
from bubblewatch.sources.importers.import_options import ImportOptions, parse_tz

IntArray = npt.NDArray[np.int64]
FORMAT_NAME = "csv"
# A text column with more distinct values than this is not a phase label.
MAX_ANNOTATION_VALUES = 64


def read_csv_table(path: str | os.PathLike[str], options: ImportOptions | None = None) -> Recording:
    """Read a telemetry CSV file (any logger's column names) into a Recording."""
    lines = TextLines(path)
    return lines.mark_truncated(_parse(lines, path=str(path), options=options))


def _parse(blocks: Iterable[TextBlock], *, path: str, options: ImportOptions | None) -> Recording:
    opts = options or ImportOptions()
    table = read_table(blocks, path)
    cols = header_columns(table.header, opts, path)
    return _Builder(path, opts, cols, table).build()


class _Builder:
    def __init__(self, path: str, opts: ImportOptions, cols: list[Col], table: Table) -> None:
        self.path = path
        self.opts = opts
        self.cols = cols
        self.table = table
        self.n_rows = table.n_rows
        self.lines = table.lines
        self.truncated = table.truncated
        self.tz = parse_tz(opts.tz)
        self.time_format = ""
        self.hosts: dict[int, str] = {}
        self.uuids: dict[int, str] = {}

    def column(self, c: Col) -> list[str]:
        return self.table.columns[c.index]

    def role(self, role: str) -> Col | None:
        return next(
            (c for c in self.cols if c.kind and c.kind.role == role and c.gpu is None), None
        )

    def build(self) -> Recording:
        if not self.n_rows:
            raise InputError("no data rows after the header", path=self.path, line=1)
        gpu_col, uuid_col = self.role(GPU), self.role(UUID)
        wide = [c for c in self.cols if c.gpu is not None]
        named = gpu_col if gpu_col is not None else uuid_col
        if named is not None:
            layout = "long"
            keys = self._long_keys(named)
        elif wide:
            layout = "wide"
            keys = None
        else:
            layout = "one"
            keys = np.zeros(self.n_rows, dtype=np.int64)
        t = self._times(keys)
        metrics = self._metric_columns()
        if layout == "wide":
            series, infos = self._wide(t, metrics)
        else:
            assert keys is not None
            series, infos = self._long(t, keys, metrics)
        meta: dict[str, Any] = {
            "source": FORMAT_NAME,
            "source_file": self.path,
            "layout": layout,
            "fields": {c.header: self._describe(c) for c in self.cols if c.kind is not None},
            "timezone": self.opts.tz,
            "time_format": self.time_format,
        }
        events, ignored = self._annotations(t)
        if ignored:
            meta["ignored_fields"] = ignored
        if events:
            meta["annotations"] = sorted({str(e.detail["column"]) for e in events})
        if self.truncated:
            meta["truncated"] = True
        return Recording(
            gpus=tuple(infos[g] for g in sorted(series)),
            series=series,
            events=tuple(events),
            meta=meta,
        )

    # -- GPUs and times -------------------------------------------------------------

    def _long_keys(self, col: Col) -> IntArray:
        ids = cv.gpu_ids(self.column(col), self.lines, path=self.path, field=col.header)
        host_col = self.role(HOST)
        hosts = self.column(host_col) if host_col is not None else [""] * len(ids)
        numeric = all(i.isdecimal() for i in ids)
        several_hosts = len(set(hosts)) > 1
        order: dict[tuple[str, str], int] = {}
        pairs = list(zip(hosts, ids, strict=True))
        first_seen = list(dict.fromkeys(pairs))
        if len(first_seen) > CSV_MAX_GPUS:
            raise LimitError(
                f"names {len(first_seen)} GPUs in column {col.header!r}; a CSV holds at most "
                f"{CSV_MAX_GPUS}",
                path=self.path,
            )
        if numeric and not several_hosts:
            keys = np.array([int(i) for i in ids], dtype=np.int64)
            for h, i in pairs:
                self.hosts.setdefault(int(i), h)
                if col.kind is not None and col.kind.role == UUID:
                    self.uuids.setdefault(int(i), i)
            return keys
        # Several hosts, or GPUs named by text: number them host by host, then by index.
        host_rank = {h: k for k, h in enumerate(dict.fromkeys(hosts))}
        first_seen.sort(key=lambda p: (host_rank[p[0]], int(p[1]) if p[1].isdecimal() else 0))
        for k, p in enumerate(first_seen):
            order[p] = k
            self.hosts[k] = p[0]
            if not p[1].isdecimal():
                self.uuids[k] = p[1]
        return np.array([order[p] for p in pairs], dtype=np.int64)

    def _times(self, keys: IntArray | None) -> FloatArray:
        col = self.role(TIME)
        start = self.opts.start_s or 0.0
        if col is not None:
            t, self.time_format = cv.times(
                self.column(col), self.lines, tz=self.tz, path=self.path, field=col.header
            )
            return t + (start if self.time_format == "seconds from the start" else 0.0)
        if self.opts.interval_s is None:
            raise InputError(
                "no time column (expected one named timestamp, time, datetime, ...): name it "
                "with --columns time=HEADER, or give the sampling interval (--interval) to "
                "rebuild times",
                path=self.path,
                line=1,
            )
        self.time_format = "rebuilt from --interval"
        if keys is None:
            return start + self.opts.interval_s * np.arange(self.n_rows, dtype=np.float64)
        # A tick ends when a GPU shows up again.
        tick = np.zeros(len(keys), dtype=np.float64)
        seen: set[int] = set()
        k = 0
        for i, g in enumerate(keys.tolist()):
            if g in seen:
                k, seen = k + 1, set()
            seen.add(g)
            tick[i] = k
        return start + self.opts.interval_s * tick

    # -- metrics --------------------------------------------------------------------

    def _metric_columns(self) -> dict[tuple[Metric, int | None], tuple[Col, FloatArray]]:
        """(metric, wide GPU) -> the winning column and its values in the metric's unit."""
        out: dict[tuple[Metric, int | None], tuple[Col, FloatArray]] = {}
        for c in self.cols:
            if c.kind is None or c.kind.role != "metric" or c.kind.metric is None:
                continue
            key = (c.kind.metric, c.gpu)
            other = out.get(key)
            if (
                other is not None
                and other[0].kind is not None
                and (other[0].kind.priority <= c.kind.priority)
            ):
                continue
            raw = cv.numbers(self.column(c), self.lines, path=self.path, field=c.header)
            scale = c.kind.scale
            if scale is None:  # percent, unless the values are fractions
                finite = raw[np.isfinite(raw)]
                fractions = (
                    finite.size > 0
                    and float(finite.max()) <= 1.05
                    and bool(np.any(finite != np.round(finite)))
                )
                scale = 1.0 if fractions else 0.01
            vals = cv.checked(
                c.kind.metric, raw * scale, self.lines, path=self.path, field=c.header
            )
            out[key] = (c, vals)
        return out

    def _describe(self, c: Col) -> str:
        assert c.kind is not None
        what = c.kind.metric.value if c.kind.metric is not None else c.kind.role
        return what if c.gpu is None else f"{what} (GPU {c.gpu})"

    def _long(
        self,
        t: FloatArray,
        keys: IntArray,
        metrics: Mapping[tuple[Metric, int | None], tuple[Col, FloatArray]],
    ) -> tuple[dict[int, GpuSeries], dict[int, GpuInfo]]:
        names = self._text_by_gpu(NAME, keys)
        limits = self._limit_by_gpu(keys)
        series: dict[int, GpuSeries] = {}
        infos: dict[int, GpuInfo] = {}
        hosts, uuids = self.hosts, self.uuids
        for g, sel in by_gpu(keys):
            order = sel[np.argsort(t[sel], kind="stable")]
            values = {
                m: v[order]
                for (m, wide), (_, v) in metrics.items()
                if wide is None and np.isfinite(v[order]).any()
            }
            series[g] = GpuSeries(g, t[order], values)
            infos[g] = GpuInfo(
                index=g,
                uuid=uuids.get(g, ""),
                name=names.get(g, ""),
                power_limit_w=limits.get(g),
                host=hosts.get(g, ""),
            )
        return series, infos

    def _wide(
        self,
        t: FloatArray,
        metrics: Mapping[tuple[Metric, int | None], tuple[Col, FloatArray]],
    ) -> tuple[dict[int, GpuSeries], dict[int, GpuInfo]]:
        order = np.argsort(t, kind="stable")
        # One pass over the columns, not one per GPU: 1024 GPUs x 8 fields stays linear.
        per_gpu: dict[int, dict[Metric, FloatArray]] = {}
        shared: dict[Metric, FloatArray] = {}
        for (m, g), (_, v) in metrics.items():
            if np.isfinite(v).any():
                (shared if g is None else per_gpu.setdefault(g, {}))[m] = v[order]
        for _, g in metrics:
            if g is not None:
                per_gpu.setdefault(g, {})
        names: dict[int, str] = {}
        for c in self.cols:
            if c.gpu is not None and c.kind and c.kind.role == NAME:
                names.setdefault(c.gpu, self.column(c)[0])
        series: dict[int, GpuSeries] = {}
        infos: dict[int, GpuInfo] = {}
        for g in sorted(per_gpu):
            series[g] = GpuSeries(g, t[order], {**shared, **per_gpu[g]})
            infos[g] = GpuInfo(index=g, name=names.get(g, ""))
        return series, infos

    def _text_by_gpu(self, role: str, keys: IntArray) -> dict[int, str]:
        col = self.role(role)
        if col is None:
            return {}
        out: dict[int, str] = {}
        for g, v in zip(keys.tolist(), self.column(col), strict=True):
            if v and not cv.is_absent(v):
                out.setdefault(g, v)
        return out

    def _limit_by_gpu(self, keys: IntArray) -> dict[int, float]:
        col = self.role(POWER_LIMIT)
        if col is None:
            return {}
        vals = cv.numbers(self.column(col), self.lines, path=self.path, field=col.header)
        out: dict[int, float] = {}
        for g, v in zip(keys.tolist(), vals.tolist(), strict=True):
            if np.isfinite(v) and v > 0:
                out.setdefault(g, float(v))
        return out

    # -- annotations ------------------------------------------------------------------

    def _annotations(self, t: FloatArray) -> tuple[list[Event], list[str]]:
        """Events where a text column (a phase label) changes value; numeric ones are ignored."""
        events: list[Event] = []
        ignored: list[str] = []
        order = np.argsort(t, kind="stable")
        for c in self.cols:
            if c.kind is not None:
                continue
            cells = self.column(c)
            if _numeric(cells) or len(set(cells)) > MAX_ANNOTATION_VALUES:
                ignored.append(c.header)
                continue
            last = None
            for i in order.tolist():
                v = cells[i]
                if v != last:
                    events.append(
                        Event(float(t[i]), "annotation", None, {"column": c.header, "value": v})
                    )
                    last = v
        return events, ignored


def _numeric(cells: list[str]) -> bool:
    for c in cells[:200]:
        if cv.is_absent(c):
            continue
        try:
            float(c)
        except ValueError:
            return False
    return True
