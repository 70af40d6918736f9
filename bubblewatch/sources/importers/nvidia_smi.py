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
from collections.abc import Iterable, Iterator
from datetime import datetime, tzinfo
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.model.samples import Sample
from bubblewatch.sources.importers._common import TextBlock, check_value
from bubblewatch.sources.importers._pieces import (
    by_gpu,
    file_pieces,
    parse_lines,
    reported,
)
from bubblewatch.sources.importers._smi_fast import Rows, convert
from bubblewatch.sources.importers._smi_fields import (
    ABSENT,
    Column,
    first_line_columns,
    gpu_index,
    number,
)
from bubblewatch.sources.importers._smi_unnamed import UnnamedRows
from bubblewatch.sources.importers.import_options import ImportOptions, parse_tz

FORMAT_NAME = "nvidia-smi"
PIECE_SAMPLES = 100_000


_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")

__all__ = ["nvidia_smi_pieces", "parse_nvidia_smi", "read_nvidia_smi"]


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
    return file_pieces(path, lambda: _Parser(str(path), options or ImportOptions()), samples)


def parse_nvidia_smi(
    lines: Iterable[tuple[int, str, bool]],
    *,
    path: str = "<input>",
    options: ImportOptions | None = None,
) -> Recording:
    """Parse (line number, text, ended) lines of nvidia-smi CSV output; pure, no I/O."""
    return parse_lines(_Parser(path, options or ImportOptions()), lines)


class _Parser:
    timed = True  # rows are timed as they are read (those waiting for their GPU stay back)

    def __init__(self, path: str, options: ImportOptions) -> None:
        self.path = path
        self.opts = options
        self.tz: tzinfo = parse_tz(options.tz)
        self.columns: list[Column] = []
        self.header_cells: list[str] | None = None
        self.builder = RecordingBuilder()
        self.gpus: dict[int, dict[str, Any]] = {}
        self.uuid_index: dict[str, int] = {}
        self.unavailable: dict[str, str] = {}
        self.truncated = False
        self._last_stamp: tuple[str, float] = ("", 0.0)
        # state for numbering GPUs and ticks when the file lacks index/timestamp columns
        self._row = 0
        # Rows of a capture without index or uuid: GPUs assigned from the sampling at the end.
        self._unnamed = UnnamedRows()
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
            self.columns, is_header = first_line_columns(
                cells, self.opts, path=self.path, line=lineno
            )
            if is_header:
                self.header_cells = cells
                return
        elif self.header_cells is not None and cells == self.header_cells:
            self._unnamed.restart()
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
                index = gpu_index(cell, path=self.path, line=lineno, field=col.name)
            elif field.role == "uuid":
                uuid = cell
            elif field.role == "name":
                name = cell
            elif field.role == "pci_bus_id":
                bus = cell
            elif field.role == "power_limit":
                limit = number(cell, col, field, self.unavailable, path=self.path, line=lineno)
            elif field.metric is not None:
                v = number(cell, col, field, self.unavailable, path=self.path, line=lineno)
                if v is not None:
                    values[field.metric] = check_value(
                        field.metric, v, path=self.path, line=lineno, field=col.name
                    )
        if index is None and not uuid and stamp is not None:
            t = self._parse_stamp(stamp, lineno)
            self._unnamed.add_row(t, values, limit)
            return
        gpu = self._gpu_index(index, uuid)
        t = self._time(stamp, gpu, lineno)
        info = self.gpus.setdefault(gpu, {})
        for key, value in (("uuid", uuid), ("name", name), ("pci_bus_id", bus)):
            if value and value not in ABSENT and not value.startswith("["):
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

    # -- result ---------------------------------------------------------------

    def _add_rows(self, rows: Rows) -> None:
        """A block the fast path converted: its rows go where the row path would put them."""
        n = rows.t_s.shape[0]
        self._row += n
        if rows.gpu is None and rows.uuids is None:
            self._unnamed.add_part(rows.t_s, rows.values, rows.limit_w)
        else:
            gpus = rows.gpu
            if gpus is None:
                assert rows.uuids is not None
                number = self.uuid_index.setdefault
                gpus = np.array([number(u, len(self.uuid_index)) for u in rows.uuids])
            for g, sel in by_gpu(gpus):
                self._identify(g, sel, rows)
                values = {m: v[sel] for m, v in rows.values.items()}
                self.builder.add_columns(g, rows.t_s[sel], reported(values))
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
                if value and value not in ABSENT and not value.startswith("["):
                    info[key] = value
                    break
        if rows.limit_w is not None and "power_limit_w" not in info:
            limits = rows.limit_w[sel]
            ok = np.flatnonzero(np.isfinite(limits))
            if ok.size:
                info["power_limit_w"] = float(limits[ok[0]])

    def _add_unnamed(self) -> None:
        """Rows without index or uuid: GPU k mod n within each tick (see ticks.py)."""
        taken = self._unnamed.take(self.opts.gpu_count)
        if taken is None:
            return
        t, gpus, values, limits = taken
        for g, sel in by_gpu(gpus):
            info = self.gpus.setdefault(g, {})
            ok = np.flatnonzero(np.isfinite(limits[sel]))
            if ok.size:
                info.setdefault("power_limit_w", float(limits[sel][ok[0]]))
            part = reported({m: v[sel] for m, v in values.items()})
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


def _split(text: str) -> list[str]:
    return [c.strip() for c in next(csv.reader([text], skipinitialspace=True), [])]
