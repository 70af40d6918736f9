"""One entry point for recorded telemetry: `load_recording(path, format=...)`.

With format "auto" the content decides (never the file name): a PyTorch
profiler (Kineto) trace file, or a directory of them, is read as one;
otherwise a JSON first line is a bubblewatch trace, a `#Entity` header is dcgmi dmon output, and a
CSV header naming nvidia-smi query fields (or a first cell that is an
nvidia-smi timestamp) is nvidia-smi output. Gzip is undone first, for any format.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import fields, replace
from typing import Any

from bubblewatch.model.recording import Recording
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.importers.dcgmi import read_dcgmi
from bubblewatch.sources.importers.nvidia_smi import FIELDS as NVIDIA_SMI_FIELDS
from bubblewatch.sources.importers.nvidia_smi import read_nvidia_smi
from bubblewatch.sources.importers.options import FORMATS, ImportOptions
from bubblewatch.sources.kineto import KinetoOptions, is_kineto_trace, load_kineto
from bubblewatch.sources.trace import GZIP_MAGIC, read_trace

__all__ = ["FORMATS", "ImportOptions", "load_recording", "sniff_format"]

_SNIFF_BYTES = 64 * 1024
_SNIFF_LINES = 20
_DCGMI_HEADER = re.compile(r"^\s*#\s*Entity\b")
_SMI_TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}")
_SMI_CELL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[[^\]]*\])?\s*$")

_DESCRIPTIONS = {
    "trace": "bubblewatch trace (JSON Lines, docs/trace-format.md)",
    "nvidia-smi": "nvidia-smi --query-gpu=... --format=csv output",
    "dcgmi": "dcgmi dmon text output",
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
    return read_dcgmi(path, opts)


def _read_kineto(path: str | os.PathLike[str], opts: ImportOptions) -> Recording:
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
    if all(cells) and any(m is not None and m.group(1).lower() in NVIDIA_SMI_FIELDS for m in cells):
        return "nvidia-smi"
    shown = first.strip()[:80]
    raise InputError(f"cannot tell the format from the first line {shown!r}. {_choices()}", path=p)


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
    text = raw.decode("utf-8", errors="replace")
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
