"""Bounds on what bubblewatch reads from files, and the guards that enforce them.

Every reader takes its bounds from here, so a hostile or broken input (deep
nesting, a huge line, a gzip bomb, a 5000-digit number, a header of 100k GPUs)
gets a clear error naming the file and line instead of a traceback, a wedged
process or all the memory. docs/daemon.md ("Limits") lists each bound; the
tests in tests/hostile/ are their contract. YAML has its own guard in
`bubblewatch.safeyaml`, with the YAML bounds defined here.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import stat
import time
from typing import IO

from bubblewatch.errors import BubblewatchError, InputError

# -- YAML files: config, web config, topology, scenario, rule files -------------
YAML_MAX_BYTES = 1 << 20
YAML_MAX_DEPTH = 64
YAML_MAX_NODES = 50_000  # scalars and collections, each alias counted every time it is used
MAX_INT_DIGITS = 30  # an integer in YAML or JSON (2**64 has 20 digits)
SECRET_FILE_MAX_BYTES = 64 << 10  # a receiver's url_file or secret_file

# -- line-based files: traces (JSON Lines), nvidia-smi CSV, dcgmi dmon ----------
MAX_LINE_BYTES = 16 << 20  # one line; a trace's header line is the longest
JSON_MAX_DEPTH = 64  # nesting of one JSON value (a trace record, a profiler event)
TRACE_MAX_GPUS = 1024  # GPUs listed in one trace header

# -- profiler (Kineto) traces: one JSON file per rank -----------------------------
KINETO_MAX_FILES = TRACE_MAX_GPUS  # trace files read together (one per rank)
KINETO_MAX_FILE_BYTES = 4 << 30  # one file, on disk and once gzip is undone
KINETO_MAX_DEVICES = TRACE_MAX_GPUS  # GPUs with kernels in one file
KINETO_MAX_RANK = (1 << 20) - 1  # a rank or device index (a pipeline is laid out up to it)

# -- GPU indices and CSV tables: nvidia-smi CSV, dcgmi dmon, any logger's CSV ------
MAX_GPU_INDEX = KINETO_MAX_RANK  # a GPU index or entity id read from a file
MAX_GPU_INDEX_DIGITS = len(str(MAX_GPU_INDEX))  # more digits are refused unread
CSV_MAX_COLUMNS = 1 << 16  # cells in one CSV header line (1024 GPUs x 64 fields)
CSV_MAX_GPUS = TRACE_MAX_GPUS  # GPUs named in a CSV (wide headers, GPU columns)

# -- pipeline sizes (engine command lines, --pp-size/--tp-size, ranks) -----------
TOPOLOGY_MAX_GPUS = KINETO_MAX_RANK + 1  # pp_size x tp_size of one pipeline

# -- Prometheus HTTP API answers (analyze/compare/fleet --prometheus) -------------
# The reader asks for at most 200000 points per answer (about 6 MB); 11000
# points for each of 1000 series is about 300 MB, past what it decodes sanely.
PROMETHEUS_MAX_RESPONSE_BYTES = 256 << 20

# -- gzip: refuse a stream that inflates far beyond what telemetry does ---------
# Real traces and CSVs compress 5-20x; a bomb of zeros compresses ~1000x.
GZIP_MAX_RATIO = 200
GZIP_RATIO_AFTER_BYTES = 8 << 20  # judged only past this much output

# -- the simulator: what a scenario file or simulate's flags may ask for -------
SIM_MAX_GPUS = TRACE_MAX_GPUS  # its trace could not be read back otherwise
SIM_MAX_CONCURRENCY = 100_000  # requests a workload phase keeps outstanding
SIM_MAX_GPU_CELLS = 10_000_000  # GPUs x timeline cells (5 ms): about 1 GB
SIM_MAX_SAMPLES = 10_000_000  # GPUs x polls observed
SIM_MAX_TOKEN_LAYER_S = 3600.0  # one decode token through one layer, at the hardware's rates

# -- the daemon's memory --------------------------------------------------------
HISTORY_MAX_SAMPLES = 100_000  # sampling.history / sampling.interval, per GPU
ANALYSIS_MAX_WINDOW_S = 3600.0  # analysis.window

# -- the daemon's durations: a wait of 200000 days overflows time_t, a year-long interval never runs
DURATION_MAX_S = 30 * 86400.0  # any duration of the daemon's config not bounded below
SAMPLING_MAX_INTERVAL_S = ANALYSIS_MAX_WINDOW_S / 2  # sampling.interval: a window holds two
ANALYSIS_MAX_INTERVAL_S = 3600.0  # analysis.interval
DAY_S = 86400.0  # topology.rediscover_interval, log.ratelimit_interval, alerting.max_backoff
PEAK_MAX_HORIZON_S = 30 * 86400.0  # analysis.peak_horizon, analyze --peak-horizon
RECORD_MAX_AGE_S = 365 * 86400.0  # record.max_age
RECEIVER_MIN_TIMEOUT_S, RECEIVER_MAX_TIMEOUT_S = 0.01, 300.0  # alerting.timeout
BACKOFF_MIN_S = 0.001  # alerting.initial_backoff, alerting.max_backoff
INITIAL_BACKOFF_MAX_S = 3600.0  # alerting.initial_backoff
# -- the daemon's counts
WEB_MAX_REQUESTS = 1024  # web.max_requests: one worker thread each
ALERT_MAX_QUEUE = 100_000  # alerting.max_queue: also what memory holds while the disk is full
RECORD_MAX_KEEP = 100_000  # record.keep


# -- reading files ----------------------------------------------------------------
READ_DEADLINE_S = 10.0  # a config, rule or secret file read whole (regular files only)

LIMITS_DOC = "docs/daemon.md, Limits"


class LimitError(InputError):
    """An input beyond one of the bounds above; names the file, the line and the bound."""

    def __init__(
        self, message: str, *, path: str = "", line: int | None = None, field: str | None = None
    ) -> None:
        super().__init__(f"{message} (see {LIMITS_DOC})", path=path, line=line, field=field)


class GzipBombError(BubblewatchError, OSError):
    """Raised inside the decompressing stream; readers turn it into a LimitError."""


class _RatioGuard(io.RawIOBase):
    """A gzip stream that fails once its output outgrows its input GZIP_MAX_RATIO times."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._gz = gzip.GzipFile(fileobj=raw)
        self._out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        # read1: a stream cut short gives what it has, then EOFError on the next read.
        data = self._gz.read1(len(b))
        n = len(data)
        b[:n] = data
        self._out += n
        if self._out > GZIP_RATIO_AFTER_BYTES:
            consumed = max(1, self._raw.tell())
            if self._out > GZIP_MAX_RATIO * consumed:
                raise GzipBombError(
                    f"gzip data inflates more than {GZIP_MAX_RATIO} times "
                    f"({consumed} bytes gave {self._out}): not telemetry"
                )
        return n

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            self._raw.close()
            super().close()


def open_gzip_guarded(raw: IO[bytes]) -> io.BufferedReader:
    """A buffered reader of the gzip stream in `raw` that refuses gzip bombs."""
    return io.BufferedReader(_RatioGuard(raw))


def open_binary_guarded(path: str | os.PathLike[str]) -> io.BufferedReader:
    """Open a file's bytes, gzip undone (by magic); gzip bombs raise GzipBombError."""
    raw = open(path, "rb")  # noqa: SIM115 - owned by the returned stream
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError:
        raw.close()
        raise
    if magic == b"\x1f\x8b":
        return open_gzip_guarded(raw)
    return raw


def open_text_guarded(path: str | os.PathLike[str]) -> IO[str]:
    """Open UTF-8 text, gzip-compressed or not (by magic); gzip bombs raise GzipBombError."""
    return io.TextIOWrapper(open_binary_guarded(path), encoding="utf-8")


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth_exceeds(text: str, max_depth: int = JSON_MAX_DEPTH) -> bool:
    """True when the JSON `text` nests arrays/objects deeper than `max_depth`.

    Cheap for ordinary records: only a text with more brackets than the bound
    is scanned (strings first removed, so brackets inside them do not count).
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    for m in _BRACKETS.finditer(_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def bounded_int(digits: str) -> int:
    """`int()` for JSON's `parse_int`: at most MAX_INT_DIGITS digits (ValueError beyond)."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer with more than {MAX_INT_DIGITS} digits")
    return int(digits)


# One decoder for all: json.loads(..., parse_int=...) would build a new one per call.
BOUNDED_JSON = json.JSONDecoder(parse_int=bounded_int)


def gpu_index(text: str, *, path: str, line: int | None, field: str) -> int:
    """A GPU index read from a file: the digits of `text` as an int up to MAX_GPU_INDEX.

    The length is checked before `int()` runs, so a 5000-digit index is a
    LimitError, never Python's own digit-limit ValueError or an OverflowError
    from numpy later. `text` must be decimal digits (the caller has matched them).
    """
    digits = text.lstrip("0") or "0"
    if len(digits) > MAX_GPU_INDEX_DIGITS or int(digits) > MAX_GPU_INDEX:
        shown = text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"
        raise LimitError(
            f"GPU index {shown} is above {MAX_GPU_INDEX}", path=path, line=line, field=field
        )
    return int(digits)


def decimal(text: str, max_value: int) -> int | None:
    """`text` as an int when it is ASCII decimal digits worth at most `max_value`, else None.

    `str.isdigit()` accepts '²' (which `int()` then refuses) and any length (5000
    digits pass Python's limit no more): labels and command-line values read with it
    raised out of the readers.
    """
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > len(str(max_value)):
        return None
    value = int(text)
    return value if value <= max_value else None


def read_capped(
    path: str | os.PathLike[str], max_bytes: int, *, deadline_s: float = READ_DEADLINE_S
) -> bytes:
    """The bytes of the regular file `path` (OSError passes). LimitError past `max_bytes`,
    for a file that is not regular, or when the reads outlast `deadline_s`.

    A FIFO or a device could block the reader forever (a daemon then ignores
    SIGTERM and SIGHUP): the open does not wait for a FIFO's writer, and any
    file that is not regular is refused before it is read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise LimitError(f"not a regular file ({_file_kind(mode)})", path=str(path))
        os.set_blocking(fd, True)
        deadline = time.monotonic() + deadline_s
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 16, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if time.monotonic() > deadline:
                raise LimitError(f"not read within {deadline_s:g} s", path=str(path))
    finally:
        os.close(fd)
    if size > max_bytes:
        raise LimitError(f"file is larger than {max_bytes} bytes", path=str(path))
    return b"".join(chunks)


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a plain file"
