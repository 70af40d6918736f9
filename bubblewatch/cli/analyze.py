"""`bubblewatch analyze FILE`: the detector's verdict and recommendations on recorded telemetry.

Inputs: bubblewatch traces, nvidia-smi CSV, dcgmi dmon text, PyTorch profiler
traces (a directory or glob of files is one recording), or Prometheus history
(`--prometheus URL --start T --end T`).
Exit status 0 whatever the verdict; 2 (via InputError) only for bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from bubblewatch.analysis import analyse_window
from bubblewatch.cli._inputs import add_input_args, load_inputs, named_gpus, resolve_target
from bubblewatch.cli._long import add_window_args, input_pieces, run_long, since, whole_or_long
from bubblewatch.cli._output import add_output_args, emit, rules_of
from bubblewatch.cli._progress import Progress, fetch_limits, query_progress
from bubblewatch.cli._relative_times import accept_relative_times
from bubblewatch.cli._trace_bubble import pipeline_steps, step_lines
from bubblewatch.detect.segments import MIN_SEGMENT_S, phases
from bubblewatch.durations import format_duration, parse_duration_s
from bubblewatch.errors import InputError
from bubblewatch.limits import PEAK_MAX_HORIZON_S
from bubblewatch.model.recording import Recording
from bubblewatch.model.schedule import SCHEDULES, PipelineSchedule
from bubblewatch.rules.load_peak import DEFAULT_HORIZON_S

if TYPE_CHECKING:
    from bubblewatch.sources.engine_state import LiveState


def _peak_horizon_s(text: str) -> float:
    """`--peak-horizon`: a duration (`6h`, `7d`, seconds) within (0, PEAK_MAX_HORIZON_S]."""
    try:
        value = parse_duration_s(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 < value <= PEAK_MAX_HORIZON_S:
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most {format_duration(PEAK_MAX_HORIZON_S)}, got {text!r}"
        )
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Diagnose pipeline bubbles in recorded GPU telemetry and recommend fixes."
    p.add_argument(
        "file",
        metavar="FILE",
        nargs="*",
        help="trace (.jsonl[.gz]), nvidia-smi CSV, dcgmi dmon output, telemetry CSV, or "
        "profiler trace(s); several files (one per node) are one recording, GPUs numbered "
        "file after file; a directory or glob (e.g. the daemon's rotated traces) is read "
        "as one node's recording",
    )
    add_input_args(p)
    p.add_argument("--last", type=float, metavar="S", help="analyse only the last S seconds")
    p.add_argument(
        "--peak-horizon",
        dest="peak_horizon_s",
        type=_peak_horizon_s,
        default=DEFAULT_HORIZON_S,
        metavar="DURATION",
        help="load history the fill knobs are sized for: the p95 of running + queued "
        "requests over its last DURATION (e.g. 6h, 7d; default 1d)",
    )
    p.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="a training pipeline's schedule, to judge its bubble against what it allows "
        "(default: the one a discovered or given training layout runs)",
    )
    p.add_argument(
        "--micro-batches", type=int, metavar="M", help="micro-batches per step (with --schedule)"
    )
    p.add_argument(
        "--virtual-stages",
        type=int,
        metavar="V",
        help="model chunks per rank of an interleaved schedule (default 2)",
    )
    accept_relative_times(p)  # --start -1h
    prom = p.add_argument_group("Prometheus history (instead of FILE)")
    prom.add_argument("--prometheus", metavar="URL", help="Prometheus base URL")
    prom.add_argument("--start", dest="prom_start", metavar="T", help="RFC 3339, epoch or -1h")
    prom.add_argument("--end", dest="prom_end", metavar="T", default="now", help="(default now)")
    prom.add_argument(
        "--step",
        type=float,
        metavar="S",
        help="grid step in seconds (default: from the range, at least 15 s and at most "
        "11,000 points per series)",
    )
    prom.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="range queries in flight at once (default 4)",
    )
    prom.add_argument("--selector", help="label matchers, e.g. 'Hostname=\"gpu1\"'")
    prom.add_argument(
        "--dialect", default="auto", help="auto, dcgm, nvidia_gpu_exporter, nvitop, bubblewatch"
    )
    prom.add_argument(
        "--load-selector",
        metavar="SEL",
        help="also read the engine's running and queued requests (SGLang or vLLM gauges) "
        "matching these label matchers, e.g. 'job=\"sglang\"' ('' for any)",
    )
    add_window_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.last is not None and args.last <= 0:
        raise InputError(f"--last must be > 0, got {args.last}", path="--last")
    schedule = _schedule(args)
    pieces = None if args.prometheus else input_pieces(args)
    if pieces is None:
        recording, source = _load(args)
    else:
        source = " + ".join(args.file)
        if args.last is not None:
            pieces = _last(args, pieces)
        whole, rest = whole_or_long(pieces, args.window_samples)
        if whole is None:
            return run_long(args, rest, source, schedule)
        # What fits is read the way it always was (a directory's files joined whole).
        recording = whole if whole.meta.get("files") is None else load_inputs(args.file, args)
    if args.last is not None:
        recording = recording.last(args.last)
    return _analyse(args, recording, source, schedule)


def _last(args: argparse.Namespace, pieces: Iterator[Recording]) -> Iterator[Recording]:
    """The pieces of the last `--last` seconds: the end found in a first reading."""
    end = max((p.end_s for p in pieces if p.n_samples), default=math.nan)
    again = input_pieces(args)
    assert again is not None
    return since(again, end - args.last) if math.isfinite(end) else again


def _analyse(
    args: argparse.Namespace,
    recording: Recording,
    source: str,
    schedule: PipelineSchedule | None,
) -> int:
    """The recording analysed whole: the diagnosis, its phases, the recommendations."""
    target = resolve_target(args, recording, schedule)
    result = analyse_window(
        recording,
        target,
        rules=rules_of(args),
        peak_horizon_s=args.peak_horizon_s,
        live=_recorded_state(recording),
    )
    found = None
    if recording.duration_s >= 2 * MIN_SEGMENT_S:
        # A phase that spans the whole recording takes the diagnosis just made.
        found = phases(recording, target.topology, schedule=target.schedule, whole=result.diagnosis)
    steps = pipeline_steps(recording.meta)
    extra = None if steps is None else {"pipeline_steps": dict(steps)}
    rc = emit(args, recording, result, source=source, phases=found, extra=extra)
    if not args.json:
        engine = target.engine
        lay = None if engine is None else engine.training
        e = None if lay is None else lay.expectation()
        lines = step_lines(recording.meta, None if e is None else e.bubble_ratio)
        sys.stdout.write("".join(f"{line}\n" for line in lines))
    return rc


def _recorded_state(recording: Recording) -> LiveState | None:
    """The engine's live settings the trace's header holds (see `recorded_state`)."""
    if "engine_live" not in recording.meta:
        return None  # the live-state reader and its HTTP client are not imported
    from bubblewatch.sources.engine_state import recorded_state

    return recorded_state(recording.meta)


def _schedule(args: argparse.Namespace) -> PipelineSchedule | None:
    if args.schedule is None and args.micro_batches is None:
        if args.virtual_stages is not None:
            raise InputError("--virtual-stages needs --schedule interleaved", path="--schedule")
        return None
    if args.schedule is None or args.micro_batches is None:
        raise InputError(
            "give --schedule and --micro-batches together (e.g. --schedule gpipe "
            "--micro-batches 4)",
            path="--schedule",
        )
    v = args.virtual_stages
    if v is None:
        v = 2 if args.schedule == "interleaved" else 1
    try:
        return PipelineSchedule(args.schedule, args.micro_batches, v)
    except ValueError as e:
        where = "--virtual-stages" if "virtual" in str(e) else "--micro-batches"
        raise InputError(str(e), path=where) from e


def _load(args: argparse.Namespace) -> tuple[Recording, str]:
    if args.prometheus:
        if args.file:
            raise InputError("give either FILE or --prometheus, not both", path="--prometheus")
        if not args.prom_start:
            raise InputError("--prometheus needs --start (e.g. -1h)", path="--start")
        # Imported here: a file's analysis does not pay for the Prometheus client.
        from bubblewatch.sources.prometheus_history import load_prometheus
        from bubblewatch.sources.prometheus_history.client import redact_url

        progress = Progress.for_args(args)
        rec = load_prometheus(
            args.prometheus,
            args.prom_start,
            args.prom_end,
            args.step,
            args.selector,
            dialect=args.dialect,
            load_selector=args.load_selector,
            now_s=time.time(),
            limits=fetch_limits(args.concurrency),
            on_progress=query_progress(progress, redact_url(args.prometheus)),
        )
        progress.done()
        return named_gpus(rec, args), redact_url(args.prometheus)
    if not args.file:
        raise InputError("give a FILE to analyse, or --prometheus URL", path="analyze")
    return load_inputs(args.file, args), " + ".join(args.file)
