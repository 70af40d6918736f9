"""Importer for the text output of `dcgmi dmon -e <field ids> -d <ms>`.

Layout (DCGM's dcgmi/DeviceMonitor.cpp): a header line `#Entity` followed by
each field's short name, a units line starting with `ID`, then one row per
entity per tick (`GPU 0   150.123   100   0.123 ...`, sorted by entity id).
Blank values print as `N/A`. The header is printed again every 14 ticks or
so. Older DCGM versions print `# Entity` and `Id`. MIG rows (`GPU-I 0`,
`GPU-CI 0`) and NVSwitch rows are skipped: bubblewatch works per GPU.

dmon prints no timestamps. Times are rebuilt tick by tick as
`start + tick * interval`:
  interval: ImportOptions.interval_s, else `-d N` / `--delay N` /
            `interval_ms=N` in a `#` comment line that is not the header,
            else dmon's default of 1000 ms;
  start:    ImportOptions.start_s, else `start=<ISO 8601 or epoch seconds>` in
            a `#` comment line, else 0 (times are then seconds from the first tick).
dmon sleeps `-d` after printing each tick, so its true period is slightly
longer than `-d`; rebuilt times drift by that query time per tick.

Mapping (short name, DCGM field id -> metric):
  POWER   155  -> power_avg_w (DCGM_FI_DEV_POWER_USAGE, NVML's power reading: the
                  1 s average on Ampere except GA100 and newer, an instant on GA100
                  and older; dmon prints no GPU name, so it is taken for 1 s)
  POWINST 157  -> power_instant_w
  TOTEC   156  -> energy_j (mJ / 1000)
  GPUTL   203  -> kernel_busy_ratio (percent / 100)
  GRACT   1001 -> kernel_busy_ratio, only when GPUTL is not in the output
                  (graphics engine active: a ratio that, like utilization.gpu,
                  counts any running kernel, spin kernels too)
  SMACT   1002 -> sm_active_ratio
  SMOCC   1003 -> sm_occupancy_ratio
  TENSO   1004 -> tensor_active_ratio
  SMCLK   100  -> sm_clock_mhz
  TMPTR   150  -> temperature_c
  PCITX/PCIRX 1009/1010 -> pcie_tx/rx_bytes_per_s (bytes per second)
  TXTPT/RXTPT 200/201   -> pcie_tx/rx_bytes_per_s (KB/s x 1024), only when
                  PCITX/PCIRX are not in the output
  DVCCTR  112  -> clocks_event_reasons (bitmask)
Other columns are ignored and listed in the recording's meta.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.sources.importers._common import TextBlock
from bubblewatch.sources.importers._dcgmi_columns import convert, entity_id
from bubblewatch.sources.importers._dcgmi_layout import (
    DCGMI_ERROR,
    HEADER,
    OTHER_ENTITIES,
    STOPPED,
    UNITS_FIRST,
    Column,
    comment_interval_s,
    comment_start_s,
    header_columns,
)
from bubblewatch.sources.importers._pieces import (
    by_gpu,
    file_pieces,
    reported,
)
from bubblewatch.sources.importers.import_options import ImportOptions

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

FORMAT_NAME = "dcgmi"
PIECE_SAMPLES = 100_000
DEFAULT_INTERVAL_S = 1.0  # dcgmi dmon's default -d is 1000 ms


__all__ = ["dcgmi_pieces", "read_dcgmi"]


def read_dcgmi(path: str | os.PathLike[str], options: ImportOptions | None = None) -> Recording:
    """Read saved `dcgmi dmon` output into a Recording."""
    return next(dcgmi_pieces(path, options, samples=None))


def dcgmi_pieces(
    path: str | os.PathLike[str],
    options: ImportOptions | None = None,
    *,
    samples: int | None = PIECE_SAMPLES,
) -> Iterator[Recording]:
    """The output in Recordings of about `samples` samples, in file order (None: whole).

    Rows are timed once the interval and start are known (given, or read from
    a comment); until then they wait, and come in a later piece.
    """
    return file_pieces(path, lambda: _Parser(str(path), options or ImportOptions()), samples)


class _Parser:
    def __init__(self, path: str, options: ImportOptions) -> None:
        self.path = path
        self.opts = options
        self.names: list[str] = []
        self.columns: list[Column | None] = []
        self.ignored: list[str] = []
        # Rows not yet timed: runs of (tick, gpu, values) columns, and the GPU rows of this run.
        self.parts: list[tuple[IntArray, IntArray, dict[Metric, FloatArray]]] = []
        self.run: list[list[str]] = []
        self.run_lines: list[int] = []
        self.run_ticks: list[int] = []  # run positions where the header was printed again
        self.pending = 0
        self.gpus: set[int] = set()
        self.builder = RecordingBuilder()
        self.tick = -1
        self.tick_gpus: set[int] = set()
        self.skipped_entities = 0
        self.comment_interval_s: float | None = None
        self.comment_start_s: float | None = None
        self.truncated = False
        self.seen_header = False

    def error(self, msg: str, line: int, field: str | None = None) -> InputError:
        return InputError(msg, path=self.path, line=line, field=field)

    @property
    def timed(self) -> bool:
        """The interval and start are known for good (given, or read from a comment)."""
        interval = self.opts.interval_s is not None or self.comment_interval_s is not None
        return interval and (self.opts.start_s is not None or self.comment_start_s is not None)

    def block(self, block: TextBlock) -> None:
        """A block of lines: its runs of GPU rows converted column by column."""
        width = len(self.names) + 2
        for lineno, text, ended in block.numbered():
            tokens = text.split()
            if (
                tokens
                and tokens[0] == "GPU"
                and self.seen_header
                and (len(tokens) == width or ended)
            ):
                self.run.append(tokens)  # the common line, first
                self.run_lines.append(lineno)
                continue
            self._line(lineno, text, ended)
            width = len(self.names) + 2
        self._run()
        if self.timed:  # times known for good: the rows go to the builder as they come
            self._time_parts()

    def piece(self) -> Recording:
        """The rows so far, timed, with what is known of the output."""
        self._timed_rows()
        return self.builder.build()

    def finish(self) -> Recording:
        if not self.seen_header:
            raise self.error("no '#Entity' header: not dcgmi dmon output", 1)
        return self._build()

    def _line(self, lineno: int, text: str, ended: bool) -> None:
        """A line other than a whole GPU row; the run so far is converted before any error."""
        stripped = text.strip()
        if not stripped or STOPPED.match(stripped):
            return
        if HEADER.match(stripped):
            self._header(stripped, lineno)
            return
        if stripped.startswith("#"):
            self._comment(stripped, lineno)
            return
        tokens = stripped.split()
        if tokens[0] in UNITS_FIRST and self.seen_header:
            return
        if (
            tokens[0] == "GPU"
            and self.seen_header
            and (len(tokens) == len(self.names) + 2 or ended)
        ):
            self.run.append(tokens)  # a GPU row indented, or with a tab after GPU
            self.run_lines.append(lineno)
            return
        self._run()  # the rows before this line: their errors come first
        if DCGMI_ERROR.match(stripped):
            raise self.error(f"dcgmi reported an error: {stripped}", lineno)
        if tokens[0] == "GPU" or tokens[0] in OTHER_ENTITIES:
            self._entity_row(tokens, lineno, ended)
            return
        if not ended:
            self.truncated = True
            return
        raise self.error(
            f"unrecognised line {stripped[:60]!r} (expected '#Entity' header, 'ID' units line "
            "or 'GPU <id> <values>' rows)",
            lineno,
        )

    def _header(self, text: str, lineno: int) -> None:
        names = HEADER.sub("", text).split()
        if not names:
            raise self.error("'#Entity' header names no fields", lineno)
        if self.seen_header and names == self.names:
            self.run_ticks.append(len(self.run))  # dmon reprints the header between ticks
            return
        self._run()
        self.columns = header_columns(names, path=self.path, line=lineno)
        self.names = names
        self.ignored = sorted(
            {*self.ignored, *(n for n, c in zip(names, self.columns, strict=True) if c is None)}
        )
        self.seen_header = True
        self.tick_gpus = set()

    def _comment(self, text: str, lineno: int) -> None:
        if self.comment_interval_s is None:
            self.comment_interval_s = comment_interval_s(text, path=self.path, line=lineno)
        if self.comment_start_s is None:
            self.comment_start_s = comment_start_s(text, self.opts.tz, path=self.path, line=lineno)

    def _entity_row(self, tokens: list[str], lineno: int, ended: bool) -> None:
        """A row of another entity (skipped), one cut short, or one before the header."""
        if not self.seen_header:
            raise self.error("data row before the '#Entity' header", lineno)
        if len(tokens) < 2 or len(tokens) - 2 != len(self.names):
            if not ended:
                self.truncated = True
                return
            raise self.error(
                f"expected an entity and {len(self.names)} values ({' '.join(self.names)}), "
                f"got {max(len(tokens) - 2, 0)} values",
                lineno,
            )
        entity_id(tokens[1], path=self.path, line=lineno, gpu=tokens[0] == "GPU")
        self.skipped_entities += 1

    def _run(self) -> None:
        """The GPU rows so far, converted column by column, waiting to be timed."""
        rows, lines, marks = self.run, self.run_lines, self.run_ticks
        if not rows:
            if marks:
                self.tick_gpus = set()
            self.run_ticks = []
            return
        self.run, self.run_lines, self.run_ticks = [], [], []
        gpu, values = convert(self.names, self.columns, rows, lines, self.path)
        tick, self.tick, self.tick_gpus = _ticks(gpu, marks, self.tick, self.tick_gpus)
        self.parts.append((tick, gpu, values))
        self.pending += int(gpu.size)

    def _time_parts(self) -> None:
        """The waiting rows, timed `start + tick * interval`, into the builder."""
        interval, _ = _pick(self.opts.interval_s, self.comment_interval_s, DEFAULT_INTERVAL_S)
        start, _ = _pick(self.opts.start_s, self.comment_start_s, 0.0)
        b = self.builder
        for tick, gpu, values in self.parts:
            for g, sel in by_gpu(gpu):
                self.gpus.add(g)
                cols = reported({m: v[sel] for m, v in values.items()})
                t = np.asarray(start + tick[sel] * interval, dtype=np.float64)
                b.add_columns(g, t, cols)
        self.parts, self.pending = [], 0

    def _timed_rows(self) -> None:
        """The waiting rows into the builder, with what is known of the GPUs and the output."""
        self._time_parts()
        interval, interval_from = _pick(
            self.opts.interval_s, self.comment_interval_s, DEFAULT_INTERVAL_S
        )
        _, start_from = _pick(self.opts.start_s, self.comment_start_s, 0.0)
        if start_from == "default":
            start_from = "none (seconds from the first tick)"
        b = self.builder
        for index in sorted(self.gpus):
            b.add_gpu(GpuInfo(index=index))
        meta: dict[str, Any] = {
            "source": FORMAT_NAME,
            "source_file": self.path,
            "fields": [n for n, c in zip(self.names, self.columns, strict=True) if c is not None],
            "interval_s": interval,
            "interval_from": interval_from,
            "start_from": start_from,
        }
        if self.ignored:
            meta["ignored_fields"] = self.ignored
        if self.skipped_entities:
            meta["skipped_non_gpu_rows"] = self.skipped_entities
        if self.truncated:
            meta["truncated"] = True
        b.meta = meta

    def _build(self) -> Recording:
        self._timed_rows()
        return self.builder.build()


def _pick(option: float | None, comment: float | None, default: float) -> tuple[float, str]:
    if option is not None:
        return option, "options"
    if comment is not None:
        return comment, "comment"
    return default, "default"


def _ticks(
    gpu: IntArray, marks: list[int], tick: int, seen: set[int]
) -> tuple[IntArray, int, set[int]]:
    """Each row's tick: a new one when its GPU was seen in this tick, or after a header."""
    out = np.empty(gpu.size, dtype=np.int64)
    ends = set(marks)
    current = set(seen)
    for k, g in enumerate(gpu.tolist()):
        if k in ends:
            current = set()
        if not current or g in current:
            tick += 1
            current = set()
        current.add(g)
        out[k] = tick
    if gpu.size in ends:
        current = set()
    return out, tick, current
