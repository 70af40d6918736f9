"""Importer for `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -lms N` output.

Fields may come in any subset and order. nvidia-smi separates cells with ", ",
spells the header as the query names with units in brackets
(`power.draw [W]`), and, without `nounits`, gives values their units
(`123.45 W`, `45 %`, `1980 MHz`). Values are accepted with or without units
either way. `[N/A]`, `[Not Supported]`, `N/A` and any other bracketed note
mean the GPU did not report the field: the metric is absent, never zero.

Timestamps (`2026/11/29 08:14:10.123`) are the host's local time with no zone;
they are read in `ImportOptions.tz` (UTC unless told otherwise).

Mapping (see docs/trace-format.md for the metrics):
  power.draw, power.draw.average  -> power_avg_w (the 1 s average on Ampere and
                                     newer; on older GPUs power.draw is instant)
  power.draw.instant              -> power_instant_w
  utilization.gpu [%]             -> kernel_busy_ratio (percent / 100)
  clocks.sm, clocks.current.sm    -> sm_clock_mhz
  temperature.gpu                 -> temperature_c
  memory.used [MiB]               -> memory_used_bytes
  clocks_event_reasons.active,
  clocks_throttle_reasons.active  -> clocks_event_reasons (hex bitmask)
  index, uuid, name, pci.bus_id, power.limit -> the GPU's identity
Without an index or uuid column, rows are numbered within each tick: the tick
structure of the timestamps gives the GPU count (`--gpus N` overrides it), see
ticks.py.
Other columns are ignored and listed in the recording's meta.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.model.samples import Sample
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.importers._common import TextBlock, TextLines, check_value, text_blocks
from bubblewatch.sources.importers._smi_fast import Rows, convert
from bubblewatch.sources.importers.options import ImportOptions, parse_tz
from bubblewatch.sources.importers.ticks import gpu_positions

FloatArray = npt.NDArray[np.float64]
_Part = tuple[FloatArray, dict[Metric, FloatArray], FloatArray | None]

FORMAT_NAME = "nvidia-smi"
PIECE_SAMPLES = 100_000


@dataclass(frozen=True)
class _Field:
    """What one --query-gpu field means to bubblewatch."""

    role: str  # timestamp | index | uuid | name | pci_bus_id | power_limit | metric
    metric: Metric | None = None
    unit: str = ""
    scale: float = 1.0
    hex: bool = False
    priority: int = 0  # when two columns give one metric, the lower number wins


_W, _PCT, _MHZ = "W", "%", "MHz"

FIELDS: dict[str, _Field] = {
    "timestamp": _Field("timestamp"),
    "index": _Field("index"),
    "uuid": _Field("uuid"),
    "gpu_uuid": _Field("uuid"),
    "name": _Field("name"),
    "gpu_name": _Field("name"),
    "pci.bus_id": _Field("pci_bus_id"),
    "gpu_bus_id": _Field("pci_bus_id"),
    "power.limit": _Field("power_limit", unit=_W),
    "power.draw.average": _Field("metric", Metric.POWER_AVG_W, _W, priority=0),
    "power.draw": _Field("metric", Metric.POWER_AVG_W, _W, priority=1),
    "power.draw.instant": _Field("metric", Metric.POWER_INSTANT_W, _W),
    "utilization.gpu": _Field("metric", Metric.KERNEL_BUSY_RATIO, _PCT, scale=0.01),
    "clocks.current.sm": _Field("metric", Metric.SM_CLOCK_MHZ, _MHZ, priority=0),
    "clocks.sm": _Field("metric", Metric.SM_CLOCK_MHZ, _MHZ, priority=1),
    "temperature.gpu": _Field("metric", Metric.TEMPERATURE_C, "C"),
    "memory.used": _Field("metric", Metric.MEMORY_USED_BYTES, "MiB", scale=1024.0 * 1024.0),
    "clocks_event_reasons.active": _Field(
        "metric", Metric.CLOCKS_EVENT_REASONS, hex=True, priority=0
    ),
    "clocks_throttle_reasons.active": _Field(
        "metric", Metric.CLOCKS_EVENT_REASONS, hex=True, priority=1
    ),
}

_HEADER_CELL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[([^\]]*)\])?$")
_NUMBER = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)?$")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")
_ABSENT = {"", "N/A", "n/a", "NA"}


@dataclass(frozen=True)
class _Column:
    name: str
    header_unit: str | None
    field: _Field | None  # None: a field bubblewatch does not use


def read_nvidia_smi(
    path: str | os.PathLike[str], options: ImportOptions | None = None
) -> Recording:
    """Read an nvidia-smi --query-gpu CSV file into a Recording."""
    return next(nvidia_smi_pieces(path, options, samples=None))


def nvidia_smi_pieces(
    path: str | os.PathLike[str],
    options: ImportOptions | None = None,
    *,
    samples: int | None = PIECE_SAMPLES,
) -> Iterator[Recording]:
    """The capture in Recordings of about `samples` samples, in file order (None: whole).

    Rows without an index or uuid column get their GPU from the whole
    capture's sampling: they all come in the last piece.
    """
    lines = TextLines(path)
    parser = _Parser(str(path), options or ImportOptions())
    for block in lines:
        parser.block(block)
        if samples is not None and parser.builder.n_samples >= samples:
            yield parser.piece()
    rec = parser.finish()
    yield _with_meta(rec, truncated=True) if lines.truncated else rec


def parse_nvidia_smi(
    lines: Iterable[tuple[int, str, bool]],
    *,
    path: str = "<input>",
    options: ImportOptions | None = None,
) -> Recording:
    """Parse (line number, text, ended) lines of nvidia-smi CSV output; pure, no I/O."""
    parser = _Parser(path, options or ImportOptions())
    for block in text_blocks(lines):
        parser.block(block)
    return parser.finish()


class _Parser:
    def __init__(self, path: str, options: ImportOptions) -> None:
        self.path = path
        self.opts = options
        self.tz: tzinfo = parse_tz(options.tz)
        self.columns: list[_Column] = []
        self.header_cells: list[str] | None = None
        self.builder = RecordingBuilder()
        self.gpus: dict[int, dict[str, Any]] = {}
        self.uuid_index: dict[str, int] = {}
        self.unavailable: dict[str, str] = {}
        self.truncated = False
        self._last_stamp: tuple[str, float] = ("", 0.0)
        # state for numbering GPUs and ticks when the file lacks index/timestamp columns
        self._row = 0
        # Rows of a capture without index or uuid: GPUs assigned from the sampling at the end,
        # as parts (times, values, power limits) and rows not yet made a part.
        self._unnamed: list[_Part] = []
        self._unnamed_rows: list[tuple[float, dict[Metric, float], float | None]] = []
        self._unnamed_n = 0
        self._restarts: list[int] = []
        self._tick = -1
        self._tick_gpus: set[int] = set()

    def error(self, msg: str, line: int | None, field: str | None = None) -> InputError:
        return InputError(msg, path=self.path, line=line, field=field)

    def block(self, block: TextBlock) -> None:
        """A block of lines: its columns at once where it can, else row by row."""
        lines = block.lines
        first = 0
        while not self.columns and first < len(lines):  # the header, row by row
            self._row_or_header(block.first_line + first, lines[first], True, last=False)
            first += 1
        rest = lines[first:] if first else lines
        rows = convert(self, rest) if self.columns and block.last_ended else None
        if rows is not None:
            self._add_rows(rows)
            return
        for lineno, text, ended in block.numbered(first):
            self._row_or_header(lineno, text, ended, last=not ended)

    def piece(self) -> Recording:
        """The rows so far (not those waiting for their GPU), with what is known of the GPUs."""
        self._describe()
        return self.builder.build()

    def finish(self) -> Recording:
        if not self.columns:
            raise self.error("empty file: no nvidia-smi CSV header or rows", 1)
        self._add_unnamed()
        self._describe()
        return self.builder.build()

    # -- header ---------------------------------------------------------------

    def _row_or_header(self, lineno: int, text: str, ended: bool, *, last: bool) -> None:
        if not text.strip():
            return
        cells = _split(text)
        if not self.columns:
            self._first_line(cells, lineno)
            if self.header_cells is not None:
                return
        elif self.header_cells is not None and cells == self.header_cells:
            self._restarts.append(self._unnamed_n)  # GPU numbering starts again
            return  # header printed again (a restarted or concatenated capture)
        if len(cells) != len(self.columns):
            if last and not ended:
                self.truncated = True  # the tool was killed mid-line
                return
            raise self.error(
                f"expected {len(self.columns)} comma-separated fields "
                f"({', '.join(c.name for c in self.columns)}), got {len(cells)}",
                lineno,
            )
        self._data_row(cells, lineno)

    def _first_line(self, cells: list[str], lineno: int) -> None:
        parsed = [_HEADER_CELL.match(c) for c in cells]
        looks_like_header = all(parsed) and any(
            m is not None and m.group(1).lower() in FIELDS for m in parsed
        )
        if looks_like_header:
            names = [(m.group(1), m.group(2)) for m in parsed if m is not None]
            if self.opts.fields is not None:
                given = [f.lower() for f in self.opts.fields]
                if given != [n.lower() for n, _ in names]:
                    raise self.error(
                        f"the header names fields {', '.join(n for n, _ in names)} but "
                        f"--fields gave {', '.join(self.opts.fields)}",
                        lineno,
                    )
            self.header_cells = cells
        elif self.opts.fields is not None:
            names = [(f, None) for f in self.opts.fields]
        else:
            raise self.error(
                "no header line: this looks like --format=csv,noheader output; give the "
                "--query-gpu field list (for example --fields timestamp,index,power.draw)",
                lineno,
            )
        self._set_columns(names, lineno)

    def _set_columns(self, names: list[tuple[str, str | None]], lineno: int) -> None:
        best: dict[Metric, int] = {}
        cols: list[_Column] = []
        for i, (name, unit) in enumerate(names):
            field = FIELDS.get(name.lower())
            if field is not None and unit is not None and unit.strip() != field.unit:
                raise self.error(
                    f"unit [{unit}] is not the one nvidia-smi prints for this field "
                    f"([{field.unit}])",
                    lineno,
                    name,
                )
            cols.append(_Column(name, unit, field))
            if field is not None and field.metric is not None:
                j = best.get(field.metric)
                other = cols[j].field if j is not None else None
                if other is None or field.priority < other.priority:
                    best[field.metric] = i
        # Keep one column per metric (power.draw.average over power.draw, and so on).
        self.columns = [
            c
            if c.field is None or c.field.metric is None or best[c.field.metric] == i
            else _Column(c.name, c.header_unit, None)
            for i, c in enumerate(cols)
        ]
        roles = {c.field.role for c in self.columns if c.field is not None}
        if not best:
            known = ", ".join(k for k, f in FIELDS.items() if f.metric is not None)
            raise self.error(f"no field bubblewatch can use (known metric fields: {known})", lineno)
        if "timestamp" not in roles and self.opts.interval_s is None:
            raise self.error(
                "no timestamp column: give the sampling interval (--interval) and, if known, "
                "the start time (--start) to rebuild times",
                lineno,
            )
        if not roles & {"index", "uuid"} and "timestamp" not in roles and not self.opts.gpu_count:
            raise self.error(
                "no index, uuid or timestamp column: give the number of GPUs (--gpu-count) "
                "to number rows",
                lineno,
            )

    # -- rows -----------------------------------------------------------------

    def _data_row(self, cells: list[str], lineno: int) -> None:
        self._row += 1
        stamp: str | None = None
        index: int | None = None
        uuid = name = bus = ""
        limit: float | None = None
        values: dict[Metric, float] = {}
        for col, raw in zip(self.columns, cells, strict=True):
            field = col.field
            if field is None:
                continue
            cell = raw.strip()
            if field.role == "timestamp":
                stamp = cell
            elif field.role == "index":
                index = self._int(cell, lineno, col.name)
            elif field.role == "uuid":
                uuid = cell
            elif field.role == "name":
                name = cell
            elif field.role == "pci_bus_id":
                bus = cell
            elif field.role == "power_limit":
                limit = self._number(cell, field, col, lineno)
            elif field.metric is not None:
                v = self._number(cell, field, col, lineno)
                if v is not None:
                    values[field.metric] = check_value(
                        field.metric, v, path=self.path, line=lineno, field=col.name
                    )
        if index is None and not uuid and stamp is not None:
            t = self._parse_stamp(stamp, lineno)
            self._unnamed_rows.append((t, values, limit))
            self._unnamed_n += 1
            return
        gpu = self._gpu_index(index, uuid)
        t = self._time(stamp, gpu, lineno)
        info = self.gpus.setdefault(gpu, {})
        for key, value in (("uuid", uuid), ("name", name), ("pci_bus_id", bus)):
            if value and value not in _ABSENT and not value.startswith("["):
                info.setdefault(key, value)
        if limit is not None:
            info.setdefault("power_limit_w", limit)
        self.builder.add(Sample(t, gpu, values))

    def _gpu_index(self, index: int | None, uuid: str) -> int:
        if index is not None:
            return index
        if uuid:
            return self.uuid_index.setdefault(uuid, len(self.uuid_index))
        assert self.opts.gpu_count  # checked with the header when there is no timestamp
        return (self._row - 1) % self.opts.gpu_count

    def _time(self, stamp: str | None, gpu: int, lineno: int) -> float:
        if stamp is not None:
            return self._parse_stamp(stamp, lineno)
        # No timestamp column: a tick ends when a GPU shows up a second time.
        if self._tick < 0 or gpu in self._tick_gpus:
            self._tick += 1
            self._tick_gpus = set()
        self._tick_gpus.add(gpu)
        interval = self.opts.interval_s or 0.0
        return (self.opts.start_s or 0.0) + self._tick * interval

    def _parse_stamp(self, stamp: str, lineno: int) -> float:
        if stamp == self._last_stamp[0]:
            return self._last_stamp[1]
        for fmt in _TIME_FORMATS:
            try:
                dt = datetime.strptime(stamp, fmt)
            except ValueError:
                continue
            t = dt.replace(tzinfo=self.tz).timestamp()
            self._last_stamp = (stamp, t)
            return t
        raise self.error(
            f"cannot read timestamp {stamp!r} (expected YYYY/MM/DD HH:MM:SS.mmm, as nvidia-smi "
            "prints it)",
            lineno,
            "timestamp",
        )

    def _int(self, cell: str, lineno: int, name: str) -> int:
        try:
            v = int(cell)
        except ValueError:
            raise self.error(f"must be a GPU index, got {cell!r}", lineno, name) from None
        if v < 0:
            raise self.error(f"must be a non-negative GPU index, got {v}", lineno, name)
        return v

    def _number(self, cell: str, field: _Field, col: _Column, lineno: int) -> float | None:
        if cell in _ABSENT or (cell.startswith("[") and cell.endswith("]")):
            self.unavailable.setdefault(col.name, cell or "empty")
            return None
        if field.hex:
            try:
                return float(int(cell, 16) if cell.lower().startswith("0x") else int(cell))
            except ValueError:
                raise self.error(
                    f"must be a bitmask like 0x0000000000000004, got {cell!r}", lineno, col.name
                ) from None
        m = _NUMBER.match(cell)
        if m is None:
            raise self.error(f"must be a number, got {cell!r}", lineno, col.name)
        unit = m.group(2)
        if unit is not None and unit != field.unit:
            raise self.error(
                f"unit {unit!r} is not the one expected here ({field.unit or 'none'})",
                lineno,
                col.name,
            )
        return float(m.group(1)) * field.scale

    # -- result ---------------------------------------------------------------

    def _add_rows(self, rows: Rows) -> None:
        """A block the fast path converted: its rows go where the row path would put them."""
        n = rows.t_s.shape[0]
        self._row += n
        if rows.gpu is None and rows.uuids is None:
            self._flush_unnamed()
            self._unnamed.append((rows.t_s, rows.values, rows.limit_w))
            self._unnamed_n += n
        else:
            gpus = rows.gpu
            if gpus is None:
                assert rows.uuids is not None
                number = self.uuid_index.setdefault
                gpus = np.array([number(u, len(self.uuid_index)) for u in rows.uuids])
            for g in np.unique(gpus).tolist():
                sel = np.flatnonzero(gpus == g)
                self._identify(g, sel, rows)
                values = {m: v[sel] for m, v in rows.values.items()}
                self.builder.add_columns(g, rows.t_s[sel], _reported(values))
        for name, cell in rows.unavailable.items():
            self.unavailable.setdefault(name, cell)

    def _identify(self, gpu: int, sel: npt.NDArray[np.intp], rows: Rows) -> None:
        """The first uuid, name, bus id and power limit a GPU's rows give (as the row path)."""
        info = self.gpus.setdefault(gpu, {})
        for key, cells in rows.text.items():
            if key in info:
                continue
            for j in sel.tolist():
                value = cells[j].strip()
                if value and value not in _ABSENT and not value.startswith("["):
                    info[key] = value
                    break
        if rows.limit_w is not None and "power_limit_w" not in info:
            limits = rows.limit_w[sel]
            ok = np.flatnonzero(np.isfinite(limits))
            if ok.size:
                info["power_limit_w"] = float(limits[ok[0]])

    def _flush_unnamed(self) -> None:
        rows = self._unnamed_rows
        if not rows:
            return
        self._unnamed_rows = []
        metrics = {m for _, v, _ in rows for m in v}
        self._unnamed.append(
            (
                np.array([r[0] for r in rows], dtype=np.float64),
                {m: np.array([r[1].get(m, np.nan) for r in rows]) for m in metrics},
                np.array([np.nan if r[2] is None else r[2] for r in rows]),
            )
        )

    def _add_unnamed(self) -> None:
        """Rows without index or uuid: GPU k mod n within each tick (see ticks.py)."""
        self._flush_unnamed()
        if not self._unnamed:
            return
        t = np.concatenate([p[0] for p in self._unnamed])
        metrics = {m for p in self._unnamed for m in p[1]}
        values = {
            m: np.concatenate([p[1].get(m, np.full(len(p[0]), np.nan)) for p in self._unnamed])
            for m in metrics
        }
        limits = np.concatenate(
            [p[2] if p[2] is not None else np.full(len(p[0]), np.nan) for p in self._unnamed]
        )
        self._unnamed = []
        gpus = gpu_positions(t, self._restarts, self.opts.gpu_count)
        for g in np.unique(gpus).tolist():
            sel = np.flatnonzero(gpus == g)
            info = self.gpus.setdefault(g, {})
            ok = np.flatnonzero(np.isfinite(limits[sel]))
            if ok.size:
                info.setdefault("power_limit_w", float(limits[sel][ok[0]]))
            part = _reported({m: v[sel] for m, v in values.items()})
            self.builder.add_columns(g, t[sel], part)
        self.builder.meta["gpus_from"] = (
            "--gpus" if self.opts.gpu_count else "sampling structure (no index column)"
        )

    def _describe(self) -> None:
        for gpu, info in sorted(self.gpus.items()):
            self.builder.add_gpu(GpuInfo(index=gpu, **info))
        used = [c.name for c in self.columns if c.field is not None]
        ignored = [c.name for c in self.columns if c.field is None]
        self.builder.meta.update(
            {
                "source": FORMAT_NAME,
                "source_file": self.path,
                "fields": used,
                "timezone": self.opts.tz,
            }
        )
        if ignored:
            self.builder.meta["ignored_fields"] = ignored
        if self.unavailable:
            self.builder.meta["unavailable_fields"] = dict(self.unavailable)
        if self.truncated:
            self.builder.meta["truncated"] = True


def _reported(
    values: dict[Metric, npt.NDArray[np.float64]],
) -> dict[Metric, npt.NDArray[np.float64]]:
    """The metrics some row reported (a column of NaN is a metric never reported)."""
    return {m: v for m, v in values.items() if bool(np.isfinite(v).any())}


def _split(text: str) -> list[str]:
    return [c.strip() for c in next(csv.reader([text], skipinitialspace=True), [])]


def _with_meta(rec: Recording, **extra: Any) -> Recording:
    return replace(rec, meta={**rec.meta, **extra})
