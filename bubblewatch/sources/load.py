"""One entry point for recorded telemetry: `load_recording(path, format=...)`.

With format "auto" the content decides (never the file name): a PyTorch
profiler (Kineto) trace file, or a directory of them, is read as one;
otherwise a JSON first line is a bubblewatch trace, a `#Entity` header is dcgmi dmon output, a
CSV header naming nvidia-smi query fields (or a first cell that is an
nvidia-smi timestamp) is nvidia-smi output, and any other CSV header naming
a telemetry field in a common spelling (`power_w`, `gpu_util_pct`,
`sm_active`, `DCGM_FI_DEV_POWER_USAGE`, ...) is read by the generic CSV
importer. Gzip is undone first, for any format. `join_side_by_side` makes one
recording of several files (the nodes of a multi-node job).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any

from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording
from bubblewatch.sources.importers._smi_fields import FIELDS as NVIDIA_SMI_FIELDS
from bubblewatch.sources.importers.column_roles import normalise, recognise, split_gpu
from bubblewatch.sources.importers.import_options import ImportOptions
from bubblewatch.sources.importers.nvidia_smi import nvidia_smi_pieces, read_nvidia_smi
from bubblewatch.sources.kineto import is_kineto_trace
from bubblewatch.sources.trace import GZIP_MAGIC, TraceReader, read_trace
from bubblewatch.sources.trace.reader import PIECE_SAMPLES

__all__ = ["load_recording", "recording_pieces", "sniff_format"]

_SNIFF_BYTES = 64 * 1024
_SNIFF_LINES = 20
_DCGMI_HEADER = re.compile(r"^\s*#\s*Entity\b")
_SMI_TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}")
_SMI_CELL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[[^\]]*\])?\s*$")

_NO_FIELD = NVIDIA_SMI_FIELDS["timestamp"]  # a field with no metric
_DESCRIPTIONS = {
    "trace": "bubblewatch trace (JSON Lines, docs/trace-format.md)",
    "nvidia-smi": "nvidia-smi --query-gpu=... --format=csv output",
    "dcgmi": "dcgmi dmon text output",
    "csv": "a telemetry CSV with a header naming its columns (timestamp, gpu, power_w, ...)",
    "kineto": "PyTorch profiler (Kineto) trace files, one per rank, or their directory",
}


def load_recording(
    path: str | os.PathLike[str],
    format: str | None = None,
    options: ImportOptions | None = None,
    **importer_options: Any,
) -> Recording:
    """Read a recording in any supported format.

    `format` (or `options.format`) is "auto", "trace", "nvidia-smi", "dcgmi" or
    "kineto"; keyword arguments set ImportOptions fields (start_s, interval_s,
    tz, fields, gpu_count, pp_size, tp_size, bin_s). Options a format does not
    use are ignored.
    """
    opts = _options(path, format, options, importer_options)
    if opts.format == "kineto" or (opts.format == "auto" and is_kineto_trace(path)):
        return _read_kineto(path, opts)
    if os.path.isdir(path):
        raise InputError(
            "is a directory without profiler traces (*.json[.gz] with traceEvents)", path=str(path)
        )
    fmt = opts.format if opts.format != "auto" else sniff_format(path)
    if fmt == "trace":
        return read_trace(path)
    if fmt == "nvidia-smi":
        return read_nvidia_smi(path, opts)
    if fmt == "csv":
        from bubblewatch.sources.importers.csv_table import read_csv_table

        return read_csv_table(path, opts)
    from bubblewatch.sources.importers.dcgmi import read_dcgmi

    return read_dcgmi(path, opts)


def recording_pieces(
    path: str | os.PathLike[str],
    format: str | None = None,
    options: ImportOptions | None = None,
    *,
    samples: int = PIECE_SAMPLES,
    **importer_options: Any,
) -> Iterator[Recording]:
    """`load_recording` in pieces of about `samples` samples, in file order.

    Traces, nvidia-smi captures and dcgmi output come piece by piece (bounded
    memory); the other formats, whose reading needs the whole file, as one piece.
    """
    opts = _options(path, format, options, importer_options)
    fmt = opts.format
    if fmt == "auto" and not os.path.isdir(path) and not is_kineto_trace(path):
        fmt = sniff_format(path)
    if fmt == "trace":
        return TraceReader(path).pieces(samples)
    if fmt == "nvidia-smi":
        return nvidia_smi_pieces(path, opts, samples=samples)
    if fmt == "dcgmi":
        from bubblewatch.sources.importers.dcgmi import dcgmi_pieces

        return dcgmi_pieces(path, opts, samples=samples)
    return iter([load_recording(path, options=opts)])


def _options(
    path: str | os.PathLike[str],
    format: str | None,
    options: ImportOptions | None,
    importer_options: dict[str, Any],
) -> ImportOptions:
    opts = options or ImportOptions()
    known = {f.name for f in fields(ImportOptions)}
    unknown = sorted(set(importer_options) - known)
    if unknown:
        raise TypeError(f"unknown import option(s) {', '.join(unknown)} (known: {sorted(known)})")
    try:
        opts = replace(opts, **importer_options)
        if format is not None:
            opts = replace(opts, format=format)
    except ValueError as e:
        raise InputError(str(e), path=str(path)) from e
    if opts.format == "auto" and opts.columns and not os.path.isdir(path):
        # Only the generic CSV importer reads a column mapping: the file is one.
        opts = replace(opts, format="csv")
    return opts


def _read_kineto(path: str | os.PathLike[str], opts: ImportOptions) -> Recording:
    from bubblewatch.sources.kineto import KinetoOptions, load_kineto

    try:
        kopts = KinetoOptions(bin_s=opts.bin_s, pp_size=opts.pp_size, tp_size=opts.tp_size)
    except ValueError as e:
        raise InputError(str(e), path=str(path)) from e
    return load_kineto(path, kopts)


def sniff_format(path: str | os.PathLike[str]) -> str:
    """The format of `path` judged from its first lines, or an InputError listing the formats."""
    p = str(path)
    head = _head_lines(p)
    first = next((ln for ln in head if ln.strip()), None)
    if first is None:
        raise InputError(f"empty file: nothing to tell the format by. {_choices()}", path=p)
    if first.lstrip().startswith("{"):
        return "trace"
    if any(_DCGMI_HEADER.match(ln) for ln in head):
        return "dcgmi"
    if _SMI_TIMESTAMP.match(first.strip()):
        return "nvidia-smi"
    cells = [_SMI_CELL.match(c) for c in first.split(",")]
    smi_metric = any(
        m is not None and NVIDIA_SMI_FIELDS.get(m.group(1).lower(), _NO_FIELD).metric is not None
        for m in cells
    )
    if all(cells) and smi_metric:
        return "nvidia-smi"
    if "," in first and _names_telemetry(first.split(",")):
        return "csv"
    shown = first.strip()[:80]
    raise InputError(
        f"not telemetry bubblewatch knows: cannot tell the format from the first line "
        f"{shown!r}. {_choices()}",
        path=p,
    )


def _names_telemetry(header: list[str]) -> bool:
    """True when a header cell names a per-GPU measurement in a spelling we know."""
    for cell in header:
        name, unit = normalise(cell)
        kind = recognise(name, unit)
        if kind is None:
            wide = split_gpu(name)
            kind = None if wide is None else recognise(wide[0], unit)
        if kind is not None and kind.metric is not None:
            return True
    return False


def _choices() -> str:
    listed = "; ".join(f"{k}: {v}" for k, v in _DESCRIPTIONS.items())
    return f"Give --format, one of: {listed}"


def _head_lines(path: str) -> list[str]:
    """The first lines of the file, gzip undone; a partial last line is dropped."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_SNIFF_BYTES)
            if raw[:2] == GZIP_MAGIC:
                f.seek(0)
                raw = _gunzip_head(f, path)
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror or e}", path=path) from e
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")  # Excel's BOM
    lines = text.splitlines()
    if len(raw) >= _SNIFF_BYTES and len(lines) > 1 and not text.endswith("\n"):
        lines.pop()  # a cut last line; a first line longer than the head is kept, cut
    return lines[:_SNIFF_LINES]


def _gunzip_head(f: Any, path: str) -> bytes:
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = b""
    try:
        while len(out) < _SNIFF_BYTES:
            chunk = f.read(8192)
            if not chunk:
                break
            out += d.decompress(chunk, _SNIFF_BYTES - len(out))
            if d.eof:
                break
    except (zlib.error, gzip.BadGzipFile) as e:
        raise InputError(f"cannot decode gzip data: {e}", path=path) from e
    return out
