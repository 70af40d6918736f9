"""`analyze` of a recording too long to hold whole: read in pieces, diagnosed window by window.

An input that can be read piece by piece (a trace, an nvidia-smi capture, a
directory of rotated traces) is read until it holds more than
`--window-samples` GPU samples; if it ends first, it is analysed whole as
always. Otherwise it is analysed in windows of `--window` seconds
(bubblewatch.detect.long), holding one window at a time: the report's
headline is one window's diagnosis, the phases cover the whole recording.
"""

from __future__ import annotations

import argparse
import itertools
import math
import shutil
from collections.abc import Iterator
from typing import Any

from bubblewatch.analysis import judge_recorded, target_for
from bubblewatch.cli._inputs import import_options, named_gpus, resolve_topology, target_args
from bubblewatch.cli._output import emit, picture_rows, rules_of
from bubblewatch.cli._progress import Progress
from bubblewatch.cli._trace_bubble import pipeline_steps
from bubblewatch.detect.activity import StageActivity, stage_activity
from bubblewatch.detect.long import LongAnalysis, analyse_windows
from bubblewatch.detect.types import Diagnosis
from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology
from bubblewatch.rules.load_peak import DEFAULT_HORIZON_S
from bubblewatch.sources.stream import concat, windows

DEFAULT_WINDOW_S = 600.0
DEFAULT_WINDOW_SAMPLES = 200_000


def add_window_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("long recordings")
    g.add_argument(
        "--window",
        type=float,
        default=DEFAULT_WINDOW_S,
        metavar="S",
        help="a recording longer than one window is diagnosed in windows of S seconds "
        f"(default {DEFAULT_WINDOW_S:g})",
    )
    g.add_argument(
        "--window-samples",
        type=int,
        default=DEFAULT_WINDOW_SAMPLES,
        metavar="N",
        help="the most GPU samples held at once: a recording with more is read in pieces and "
        f"diagnosed window by window (default {DEFAULT_WINDOW_SAMPLES:,})",
    )


def input_pieces(args: argparse.Namespace) -> Iterator[Recording] | None:
    """The input piece by piece, or None where it is read whole (several nodes, profiler traces)."""
    if args.window <= 0:
        raise InputError(f"--window must be > 0, got {args.window:g}", path="--window")
    if args.window_samples < 1000:
        raise InputError(
            f"--window-samples must be at least 1000, got {args.window_samples}",
            path="--window-samples",
        )
    if len(args.file) != 1 or args.format == "kineto":
        return None
    from bubblewatch.sources.end_to_end import input_files
    from bubblewatch.sources.end_to_end_stream import joined_pieces
    from bubblewatch.sources.load import recording_pieces

    path = args.file[0]
    files = input_files(path)
    opts = import_options(args)
    if files is None:
        try:
            pieces = recording_pieces(path, format=args.format, **opts)
        except FileNotFoundError as e:
            raise InputError("no such file", path=path) from e
    else:
        pieces = joined_pieces(
            files,
            lambda f: recording_pieces(f, format=args.format, **opts),
            probe=lambda f: next(recording_pieces(f, format=args.format, samples=1, **opts)),
        )
    return (named_gpus(p, args) for p in pieces)


def whole_or_long(
    pieces: Iterator[Recording], max_samples: int
) -> tuple[Recording | None, Iterator[Recording]]:
    """The whole recording if it holds at most `max_samples`, else (None, all its pieces)."""
    held: list[Recording] = []
    n = 0
    for piece in pieces:
        held.append(piece)
        n += piece.n_samples
        if n > max_samples:
            return None, itertools.chain(held, pieces)
    return concat(held) if held else None, iter(())


def since(pieces: Iterator[Recording], start_s: float) -> Iterator[Recording]:
    for p in pieces:
        yield p.window(start_s, math.inf)


def run_long(
    args: argparse.Namespace,
    pieces: Iterator[Recording],
    source: str,
    schedule: PipelineSchedule | None,
) -> int:
    """Analyse the pieces window by window and print the report."""
    progress = Progress.for_args(args)
    given: list[Topology | None] = []
    explicit = bool(args.topology or args.pp_size is not None or args.tp_size is not None) or bool(
        args.engine_cmdline
    )

    def topology(window: Recording) -> Topology | None:
        if not explicit:
            return window.topology
        if not given:
            given.append(resolve_topology(args, window))
        return given[0]

    cols = max(20, min(100, shutil.get_terminal_size((100, 24)).columns - 16))

    def keep(window: Recording, d: Diagnosis) -> StageActivity | None:
        if args.json or not d.stages:
            return None
        return stage_activity(window, picture_rows(d), cols)

    def shown(ws: Iterator[Recording]) -> Iterator[Recording]:
        for k, w in enumerate(ws, start=1):
            progress(f"analysing {source}: window {k} ({w.n_samples:,} samples)")
            yield w

    if schedule is None:  # a training job's launch in the header gives its schedule
        first = next(pieces, None)
        if first is not None:
            pieces = itertools.chain([first], pieces)
            schedule = target_for(first.meta, topology(first), **target_args(args)).schedule
    cut = windows(pieces, length_s=args.window, max_samples=args.window_samples)
    result = analyse_windows(shown(cut), topology, schedule=schedule, keep=keep)
    progress.done()
    if result is None:
        raise InputError("no samples to analyse", path=source)
    target = target_for(
        result.last.meta, topology(result.last), schedule=schedule, **target_args(args)
    )
    report = result.last
    if getattr(args, "html", None) or getattr(args, "png", None):
        report = _headline_recording(args, result)
    judged = judge_recorded(
        result.headline,
        target,
        report,
        rules=rules_of(args),
        peak_horizon_s=getattr(args, "peak_horizon_s", DEFAULT_HORIZON_S),
    )
    steps = pipeline_steps(result.last.meta)
    extra: dict[str, Any] = {"recording": _summary(args, result)}
    if steps is not None:
        extra["pipeline_steps"] = dict(steps)
    w = result.headline_window
    # Said under the verdict, not after pages of phases: which window the headline is.
    note = (
        f"long recording: {result.n_samples:,} samples in {len(result.windows)} windows "
        f"of up to {args.window:g} s; the headline is the window "
        f"{w.start_s - result.start_s:.0f}-{w.end_s - result.start_s:.0f} s"
    )
    return emit(
        args,
        report,
        judged,
        source=source,
        phases=result.phases,
        extra=extra,
        activity=result.extra,
        notes=(note,),
    )


def _summary(args: argparse.Namespace, result: LongAnalysis[Any]) -> dict[str, Any]:
    return {
        "start": round(result.start_s, 3),
        "end": round(result.end_s, 3),
        "n_samples": result.n_samples,
        "analysed_in_windows": True,
        "window_s": args.window,
        "window_samples": args.window_samples,
        "headline_window": result.headline_window.to_dict(),
        "windows": [w.to_dict() for w in result.windows],
    }


def _headline_recording(args: argparse.Namespace, result: LongAnalysis[Any]) -> Recording:
    """The headline's window read again, for the report files."""
    w = result.headline_window
    pieces = input_pieces(args)
    assert pieces is not None
    parts = [p.window(w.start_s, math.nextafter(w.end_s, math.inf)) for p in pieces]
    return concat([p for p in parts if p.n_samples] or parts[-1:])
