"""`bubblewatch analyze FILE`: the detector's verdict on recorded telemetry.

Exit status 0 whatever the verdict; 2 (via InputError) only for bad input.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from typing import Any

from bubblewatch.detect import diagnose
from bubblewatch.detect.activity import stage_activity
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sinks.report import render_report
from bubblewatch.sources.errors import InputError

FORMATS = ("auto", "trace", "nvidia-smi", "dcgmi")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="diagnose pipeline bubbles in a recorded trace or nvidia-smi/dcgmi capture",
        description="Diagnose pipeline bubbles in recorded GPU telemetry.",
    )
    p.add_argument("file", metavar="FILE", help="trace (.jsonl[.gz]), nvidia-smi CSV or dcgmi dmon")
    p.add_argument("--format", choices=FORMATS, default="auto", help="input format (default auto)")
    p.add_argument("--pp-size", type=int, help="pipeline stages (GPU i is in stage i // tp)")
    p.add_argument("--tp-size", type=int, help="GPUs per stage (default 1 with --pp-size)")
    p.add_argument("--topology", metavar="FILE", help="static topology file (YAML or JSON)")
    p.add_argument("--engine-cmdline", metavar="CMD", help="the engine's launch command line")
    p.add_argument("--last", type=float, metavar="S", help="analyse only the last S seconds")
    p.add_argument("--interval", type=float, metavar="S", help="sample interval (dcgmi input)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recording = _load(args)
    if args.last is not None:
        if args.last <= 0:
            raise InputError(f"--last must be > 0, got {args.last}", path="--last")
        recording = recording.last(args.last)
    topology = _topology(args, recording)
    diagnosis = diagnose(recording, topology)
    # Recommendations: the rules engine plugs in here; until then an empty list.
    recommendations: list[dict[str, Any]] = []
    if args.json:
        out = diagnosis.to_dict()
        out["topology"] = None if topology is None else _topology_dict(topology)
        out["recommendations"] = recommendations
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    stages = tuple(tuple(s.gpus) for s in diagnosis.stages)
    cols = max(20, min(100, shutil.get_terminal_size((100, 24)).columns - 16))
    activity = stage_activity(recording, stages, cols) if stages else None
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    sys.stdout.write(render_report(diagnosis, activity=activity, source=args.file, colour=colour))
    return 0


def _load(args: argparse.Namespace) -> Recording:
    try:
        from bubblewatch.sources.load import load_recording
    except ImportError:  # importers not installed: traces only
        from bubblewatch.sources.trace import read_trace

        return read_trace(args.file)
    options: dict[str, Any] = {}
    if args.interval is not None:
        options["interval_s"] = args.interval
    try:
        return load_recording(args.file, format=args.format, **options)
    except FileNotFoundError as e:
        raise InputError("no such file", path=args.file) from e
    except IsADirectoryError as e:
        raise InputError("is a directory, not a file", path=args.file) from e


def _topology(args: argparse.Namespace, recording: Recording) -> Topology | None:
    """--topology, then --pp-size/--tp-size, then --engine-cmdline, then the file's own."""
    if args.topology:
        return _topology_file(args.topology, recording)
    if args.pp_size is not None or args.tp_size is not None:
        pp = args.pp_size if args.pp_size is not None else 1
        tp = args.tp_size if args.tp_size is not None else 1
        try:
            topo = Topology.from_sizes(pp, tp, source="cli")
        except TopologyError as e:
            raise InputError(str(e), path="--pp-size/--tp-size") from e
        _check_gpus(topo, recording, "--pp-size/--tp-size")
        return topo
    if args.engine_cmdline:
        return _from_cmdline(args.engine_cmdline, recording)
    return recording.topology


def _topology_file(path: str, recording: Recording) -> Topology:
    try:
        from bubblewatch.topology.static import load_topology_file

        topo = load_topology_file(path, recording.gpus)
    except ImportError:
        import yaml

        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f)
            topo = Topology.from_dict(data if isinstance(data, dict) else {})
        except (OSError, yaml.YAMLError, TopologyError) as e:
            raise InputError(str(e), path=path) from e
    except FileNotFoundError as e:
        raise InputError("no such file", path=path) from e
    _check_gpus(topo, recording, path)
    return topo


def _from_cmdline(cmdline: str, recording: Recording) -> Topology:
    from bubblewatch.topology.cmdline import parse_engine_cmdline

    try:
        argv = shlex.split(cmdline)
    except ValueError as e:
        raise InputError(f"cannot split the command line: {e}", path="--engine-cmdline") from e
    config = parse_engine_cmdline(argv, where="--engine-cmdline")
    if config is None:
        raise InputError(
            "not an SGLang, vLLM or TensorRT-LLM launch command", path="--engine-cmdline"
        )
    try:
        topo = Topology.from_sizes(
            config.pp_size,
            config.tp_size,
            base_gpu_id=config.base_gpu_id,
            gpu_id_step=config.gpu_id_step,
            engine=config.name,
            source="cmdline",
        )
    except TopologyError as e:
        raise InputError(str(e), path="--engine-cmdline") from e
    _check_gpus(topo, recording, "--engine-cmdline")
    return topo


def _check_gpus(topo: Topology, recording: Recording, where: str) -> None:
    missing = sorted(set(topo.gpus) - set(recording.series))
    if missing:
        have = ", ".join(str(g) for g in sorted(recording.series)) or "none"
        raise InputError(
            f"topology names GPU(s) {missing} that the recording does not have (it has {have})",
            path=where,
        )


def _topology_dict(topo: Topology) -> dict[str, Any]:
    d = topo.to_dict()
    d.pop("argv", None)  # the command line may carry secrets; the report does not need it
    d.pop("env", None)
    return d
