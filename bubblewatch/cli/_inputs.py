"""What `analyze` and `compare` share: reading a recording, and the options its target comes from.

An input is a file, a directory or a glob pattern: the files of a directory
or pattern (the daemon's rotated traces) are read as one recording
(bubblewatch.sources.end_to_end). Topology precedence: --topology FILE, then
--pp-size/--tp-size, then --engine-cmdline, then what the recording itself
carries (bubblewatch.analysis.target resolves them; this module only reads
the options). --gpu-model names the GPUs a recording leaves unnamed
(bubblewatch.analysis.gpu_model: what the recording names wins).
"""

from __future__ import annotations

import argparse
from typing import Any

from bubblewatch import analysis
from bubblewatch.analysis import GivenGpuModel, Target, target_for
from bubblewatch.cli._progress import Progress
from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology
from bubblewatch.sources.importers.import_options import FORMATS


def add_input_args(p: argparse.ArgumentParser) -> None:
    """Options that say how to read an input and what the input cannot say itself."""
    p.add_argument("--format", choices=FORMATS, default="auto", help="input format (default auto)")
    p.add_argument("--pp-size", type=int, help="pipeline stages (GPU i is in stage i // tp)")
    p.add_argument("--tp-size", type=int, help="GPUs per stage (default 1 with --pp-size)")
    p.add_argument("--topology", metavar="FILE", help="static topology file (docs/topology.md)")
    p.add_argument(
        "--engine-cmdline",
        metavar="CMD",
        help="the engine's launch command line (for topology and recommendations)",
    )
    p.add_argument(
        "--engine-version",
        metavar="V",
        help="the engine's version (e.g. 0.5.11): fixes are rendered with the flags it accepts",
    )
    g = p.add_argument_group("recorded files without timing or field names")
    g.add_argument("--interval", type=float, metavar="S", help="sample interval (dcgmi dmon -d)")
    g.add_argument(
        "--first-tick", type=float, metavar="EPOCH_S", help="time of the first dcgmi dmon tick"
    )
    g.add_argument("--tz", default="UTC", help="zone of nvidia-smi timestamps (default UTC)")
    g.add_argument(
        "--fields", metavar="F1,F2,...", help="--query-gpu list of a noheader nvidia-smi CSV"
    )
    g.add_argument(
        "--gpus",
        "--gpu-count",
        dest="gpu_count",
        type=int,
        metavar="N",
        help="GPUs per tick in an nvidia-smi CSV without index/uuid (default: from the timing)",
    )
    add_gpu_model_arg(g)
    g.add_argument(
        "--columns",
        metavar="KEY=HEADER,...",
        help="what a telemetry CSV's columns hold, e.g. 'time=t,gpu=card,power_avg_w=Watts,"
        "kernel_busy_ratio=busy@percent' (docs/inputs.md)",
    )
    g.add_argument(
        "--bin", type=float, default=0.01, metavar="S", help="profiler traces: grid step (0.01)"
    )


def add_gpu_model_arg(p: argparse._ActionsContainer) -> None:
    """--gpu-model: the model of the GPUs an input leaves unnamed."""
    p.add_argument(
        "--gpu-model",
        type=_gpu_model,
        metavar="NAME",
        help="the GPUs' model where the input names none, e.g. 'NVIDIA A100-SXM4-80GB': "
        "it gives the default power limit and whether the power reading is a 1 s mean or an "
        "instant (a GPU the input names keeps its name)",
    )


def _gpu_model(text: str) -> GivenGpuModel:
    try:
        return GivenGpuModel(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(e.reason) from None


def named_gpus(recording: Recording, args: argparse.Namespace) -> Recording:
    """The recording with its unnamed GPUs named by --gpu-model (unchanged without it)."""
    given: GivenGpuModel | None = getattr(args, "gpu_model", None)
    return recording if given is None else given.apply(recording)


def load_input(path: str, args: argparse.Namespace) -> Recording:
    """Any recording the analyser reads: trace, nvidia-smi, dcgmi, profiler traces.

    A directory or glob pattern is read as one recording made of its files.
    """
    return named_gpus(_read_input(path, args), args)


def _read_input(path: str, args: argparse.Namespace) -> Recording:
    from bubblewatch.sources.end_to_end import input_files, read_joined

    files = None if args.format == "kineto" else input_files(path)
    if files is None:
        return _load_one(path, args)
    progress = Progress.for_args(args)
    rec = read_joined(
        files,
        lambda f: _load_one(f, args),
        on_file=lambda i, n, f: progress(f"reading {path}: file {i + 1} of {n}", force=True),
    )
    progress.done(f"read {len(files)} files of {path}: {rec.n_samples} samples")
    return rec


def _load_one(path: str, args: argparse.Namespace) -> Recording:
    from bubblewatch.sources.load import load_recording

    try:
        return load_recording(path, format=args.format, **import_options(args))
    except FileNotFoundError as e:
        raise InputError("no such file", path=path) from e


def import_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ImportOptions fields the command line sets."""
    options: dict[str, Any] = {
        "tz": args.tz,
        "bin_s": args.bin,
        "pp_size": args.pp_size,
        "tp_size": args.tp_size,
    }
    if args.interval is not None:
        options["interval_s"] = args.interval
    if args.first_tick is not None:
        options["start_s"] = args.first_tick
    if args.fields:
        options["fields"] = tuple(f.strip() for f in args.fields.split(",") if f.strip())
    if args.gpu_count is not None:
        options["gpu_count"] = args.gpu_count
    if getattr(args, "columns", None):
        from bubblewatch.sources.importers.import_options import parse_columns

        try:
            options["columns"] = parse_columns(args.columns)
        except ValueError as e:
            raise InputError(str(e), path="--columns") from e
    return options


def load_inputs(paths: list[str], args: argparse.Namespace) -> Recording:
    """One recording from one or several files (one per node; GPUs renumbered in file order)."""
    recs = [_read_input(p, args) for p in paths]
    if len(recs) == 1:
        return named_gpus(recs[0], args)
    from bubblewatch.sources.side_by_side import join_side_by_side

    return named_gpus(join_side_by_side(recs, names=paths), args)


def target_args(args: argparse.Namespace) -> dict[str, Any]:
    """The plain values of the options a target is resolved from (absent: None)."""
    return {
        "cmdline": getattr(args, "engine_cmdline", None),
        "version": getattr(args, "engine_version", None),
    }


def resolve_topology(args: argparse.Namespace, recording: Recording) -> Topology | None:
    """The topology to analyse with (see the module docstring for precedence)."""
    return analysis.resolve_topology(
        recording,
        topology_file=getattr(args, "topology", None),
        pp_size=getattr(args, "pp_size", None),
        tp_size=getattr(args, "tp_size", None),
        **target_args(args),
    )


def resolve_target(
    args: argparse.Namespace, recording: Recording, schedule: PipelineSchedule | None = None
) -> Target:
    """Topology, engine and schedule from the options, else what the recording carries."""
    topology = resolve_topology(args, recording)
    return target_for(recording.meta, topology, schedule=schedule, **target_args(args))
