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
  power.draw, power.draw.average  -> power_avg_w, NVML's power reading: the 1 s
                                     average on Ampere (except GA100) and newer,
                                     an instant on GA100 (A100) and older, where
                                     power.draw.average is N/A (power.draw wins;
                                     the detector tells the two by the GPU name)
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
from collections.abc import Iterator
from datetime import tzinfo
from operator import methodcaller
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import FloatArray, Recording, RecordingBuilder
from bubblewatch.sources.importers._bytecells import Scratch
from bubblewatch.sources.importers._common import TextBlock
from bubblewatch.sources.importers._pieces import (
    by_gpu,
    file_pieces,
    reported,
)
from bubblewatch.sources.importers._smi_columns import Rows, convert
from bubblewatch.sources.importers._smi_fast import fast_rows
from bubblewatch.sources.importers._smi_fields import ABSENT, Column, first_line_columns
from bubblewatch.sources.importers._smi_unnamed import UnnamedRows
from bubblewatch.sources.importers.import_options import ImportOptions, parse_tz

FORMAT_NAME = "nvidia-smi"
PIECE_SAMPLES = 100_000

__all__ = ["nvidia_smi_pieces", "read_nvidia_smi"]


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
        self._row = 0  # data rows so far: GPUs are numbered from it with --gpus and no timestamp
        # Rows of a capture without index or uuid: GPUs assigned from the sampling at the end.
        self._unnamed = UnnamedRows()
        self._tick = -1  # ticks counted when the file has no timestamp column
        self._tick_gpus: set[int] = set()
        self._scratch = Scratch()  # the fast path's byte masks, reused from block to block

    def error(self, msg: str, line: int | None, field: str | None = None) -> InputError:
        return InputError(msg, path=self.path, line=line, field=field)

    def block(self, block: TextBlock) -> None:
        """A block of lines: its runs of data rows converted column by column."""
        start = 0
        while not self.columns and start < len(block):  # the header first
            cells = self._cells(block.lines[start], block.first_line + start)
            if cells is None or not self.columns:  # a blank line or the header
                start += 1
        if start:
            block = block.after(start)
        numbers = np.arange(block.first_line, block.first_line + len(block))
        if self.columns and block.last_ended and len(block):
            rows = self._fast(block)
            if rows is not None:
                self._take(rows, numbers)
                return
        lines = block.lines
        if self.columns and block.last_ended and self._plain(lines, len(self.columns)):
            self._run(",".join(lines).split(","), numbers)
            return
        run: list[str] = []
        at: list[int] = []
        for lineno, text, ended in block.numbered():
            cells = self._cells(text, lineno)
            if cells is None:
                self._run(run, np.array(at, dtype=np.int64))
                run, at = [], []
                continue
            if len(cells) != len(self.columns):
                if not ended:
                    self.truncated = True  # the tool was killed mid-line
                    continue
                self._run(run, np.array(at, dtype=np.int64))  # its errors come first
                raise self.error(
                    f"expected {len(self.columns)} comma-separated fields "
                    f"({', '.join(c.name for c in self.columns)}), got {len(cells)}",
                    lineno,
                )
            run += cells
            at.append(lineno)
        self._run(run, np.array(at, dtype=np.int64))

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

    # -- lines ----------------------------------------------------------------

    def _plain(self, lines: list[str], k: int) -> bool:
        """Every line a data row of k cells: no quote, no blank line, no header again."""
        if not lines or set(map(methodcaller("count", ","), lines)) != {k - 1}:
            return False
        text = "\n".join(lines)
        if '"' in text or (k == 1 and not all(map(str.strip, lines))):  # k > 1: blanks have no ","
            return False
        return self.header_cells is None or (
            bool(self.header_cells[-1]) and (self.header_cells[-1] not in text)
        )

    def _fast(self, block: TextBlock) -> Rows | None:
        """The block's rows by the fast path when all are plain data rows (_smi_fast)."""
        data = block.data
        if data is None:
            try:
                data = "\n".join(block.lines).encode("ascii")
            except UnicodeEncodeError:
                return None
        header = self.header_cells
        if header is not None and (not header[-1] or header[-1].encode("ascii", "replace") in data):
            return None  # perhaps the header again: the exact path tells
        return fast_rows(self.columns, data, len(block), self.tz, self._scratch)

    def _cells(self, text: str, lineno: int) -> list[str] | None:
        """A line's cells when it is a data row; None for a blank line or a header."""
        if not text.strip():
            return None
        cells = _split(text) if '"' in text else text.split(",")
        if not self.columns:
            stripped = [c.strip() for c in cells]
            self.columns, is_header = first_line_columns(
                stripped, self.opts, path=self.path, line=lineno
            )
            if is_header:
                self.header_cells = stripped
                return None
        elif self._header_again(text, cells):
            self._unnamed.restart()
            return None  # header printed again (a restarted or concatenated capture)
        return cells

    def _header_again(self, text: str, cells: list[str]) -> bool:
        header = self.header_cells
        if header is None or (header[-1] and header[-1] not in text):
            return False
        return [c.strip() for c in cells] == header

    # -- rows -----------------------------------------------------------------

    def _run(self, cells: list[str], lines: npt.NDArray[np.int64]) -> None:
        """Data rows (their cells, row after row) to the builder, or their first error."""
        n = lines.shape[0]
        if n == 0:
            return
        self._take(convert(self.columns, cells, lines, self.tz, self.path), lines)

    def _take(self, rows: Rows, lines: npt.NDArray[np.int64]) -> None:
        """A run's rows, converted, to the builder (rows without a GPU wait for the sampling)."""
        n = lines.shape[0]
        for name, cell in rows.unavailable.items():
            self.unavailable.setdefault(name, cell)
        row = self._row + np.arange(n)  # 0-based data row numbers
        self._row += n
        gpu = rows.index
        keep = np.arange(n)
        if gpu is None:
            # No index: the uuid, else the PCI bus id, tells the GPUs apart (a key per GPU).
            raw = rows.text.get("uuid", rows.text.get("pci_bus_id"))
            uuids = None if raw is None else [u.strip() for u in raw]
            has_uuid = np.array([bool(u) for u in uuids]) if uuids else np.zeros(n, dtype=bool)
            if rows.t_s is not None:  # rows without index or uuid wait for the sampling
                wait = np.flatnonzero(~has_uuid)
                if wait.size:
                    limit = None if rows.limit_w is None else rows.limit_w[wait]
                    values = {m: v[wait] for m, v in rows.values.items()}
                    self._unnamed.add_part(rows.t_s[wait], values, limit)
                keep = np.flatnonzero(has_uuid)
                by_row = np.zeros(n, dtype=bool)
            else:
                by_row = ~has_uuid
            gpu = self._numbered(uuids, has_uuid, by_row, row, lines)
        if not keep.size:
            return
        t = rows.t_s if rows.t_s is not None else self._ticks(gpu)
        for g, sel in by_gpu(gpu[keep]):
            at = keep[sel]
            self._identify(g, at, rows)
            values = {m: v[at] for m, v in rows.values.items()}
            self.builder.add_columns(g, t[at], reported(values))

    def _numbered(
        self,
        uuids: list[str] | None,
        has_uuid: npt.NDArray[np.bool_],
        by_row: npt.NDArray[np.bool_],
        row: npt.NDArray[np.int64],
        lines: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """GPUs of rows without an index: by uuid in order of appearance, else by row (--gpus)."""
        gpu = np.full(row.shape, -1, dtype=np.int64)
        if by_row.any():
            count = self.opts.gpu_count
            if not count:
                raise self.error(
                    "no index, uuid or timestamp in this row: give the number of GPUs "
                    "(--gpu-count) to number rows",
                    int(lines[np.flatnonzero(by_row)[0]]),
                    "uuid",
                )
            gpu[by_row] = row[by_row] % count
        if uuids is not None:
            number = self.uuid_index.setdefault
            for j in np.flatnonzero(has_uuid).tolist():
                gpu[j] = number(uuids[j], len(self.uuid_index))
        return gpu

    def _ticks(self, gpus: npt.NDArray[np.int64]) -> FloatArray:
        """Times without a timestamp column: a tick ends when a GPU shows up a second time."""
        tick = np.empty(gpus.shape, dtype=np.float64)
        for j, g in enumerate(gpus.tolist()):
            if self._tick < 0 or g in self._tick_gpus:
                self._tick += 1
                self._tick_gpus = set()
            self._tick_gpus.add(g)
            tick[j] = self._tick
        interval = self.opts.interval_s or 0.0
        return (self.opts.start_s or 0.0) + tick * interval

    # -- result ---------------------------------------------------------------

    def _identify(self, gpu: int, sel: npt.NDArray[np.intp], rows: Rows) -> None:
        """The first uuid, name, bus id and power limit a GPU's rows give."""
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
        lost = int(np.count_nonzero(gpus < 0))
        if lost:
            # Ticks with a row lost or added: which row is which GPU is unknown (ticks.py).
            self.builder.meta["rows_without_gpu"] = lost
            keep = gpus >= 0
            t, gpus, limits = t[keep], gpus[keep], limits[keep]
            values = {m: v[keep] for m, v in values.items()}
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
