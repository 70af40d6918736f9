"""What `analyze` and `compare` share: reading a recording, its topology and engine config.

An input is a file, a directory or a glob pattern: the files of a directory
or pattern (the daemon's rotated traces) are read as one recording
(bubblewatch.sources.joined). Topology precedence: --topology FILE, then
--pp-size/--tp-size, then --engine-cmdline, then what the recording itself
carries.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from bubblewatch.cli._progress import Progress
from bubblewatch.detect.schedule import PipelineSchedule
from bubblewatch.model.recording import Recording
from bubblewatch.model.topology import Topology, TopologyError, index_ranges
from bubblewatch.sources.errors import InputError
from bubblewatch.sources.importers.options import FORMATS
from bubblewatch.topology.engine import EngineConfig

log = logging.getLogger(__name__)


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
    g.add_argument(
        "--columns",
        metavar="KEY=HEADER,...",
        help="what a telemetry CSV's columns hold, e.g. 'time=t,gpu=card,power_avg_w=Watts,"
        "kernel_busy_ratio=busy@percent' (docs/inputs.md)",
    )
    g.add_argument(
        "--bin", type=float, default=0.01, metavar="S", help="profiler traces: grid step (0.01)"
    )


def load_input(path: str, args: argparse.Namespace) -> Recording:
    """Any recording the analyser reads: trace, nvidia-smi, dcgmi, profiler traces.

    A directory or glob pattern is read as one recording made of its files.
    """
    from bubblewatch.sources.joined import input_files, read_joined

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
        from bubblewatch.sources.importers.options import parse_columns

        try:
            options["columns"] = parse_columns(args.columns)
        except ValueError as e:
            raise InputError(str(e), path="--columns") from e
    return options


def load_inputs(paths: list[str], args: argparse.Namespace) -> Recording:
    """One recording from one or several files (one per node; GPUs renumbered in file order)."""
    recs = [load_input(p, args) for p in paths]
    if len(recs) == 1:
        return recs[0]
    from bubblewatch.sources.join import join_recordings

    return join_recordings(recs, names=paths)


def resolve_topology(args: argparse.Namespace, recording: Recording) -> Topology | None:
    """The topology to analyse with (see the module docstring for precedence)."""
    if getattr(args, "topology", None):
        from bubblewatch.topology.static import load_topology_file

        topo = load_topology_file(args.topology, recording.gpus)
        _check_gpus(topo, recording, args.topology)
        return topo
    if args.pp_size is not None or args.tp_size is not None:
        try:
            topo = Topology.from_sizes(
                1 if args.pp_size is None else args.pp_size,
                1 if args.tp_size is None else args.tp_size,
                source="cli",
            )
        except TopologyError as e:
            raise InputError(str(e), path="--pp-size/--tp-size") from e
        _check_gpus(topo, recording, "--pp-size/--tp-size")
        _note_left_out(topo, recording)
        return _with_argv(topo, recording.topology)
    engine = engine_from_cmdline(args.engine_cmdline, getattr(args, "engine_version", None))
    if engine is not None and engine.training is not None:
        topo = _training_topology(args.engine_cmdline, recording)
        _check_gpus(topo, recording, "--engine-cmdline")
        return topo
    if engine is not None:
        from bubblewatch.topology.gpumap import GpuMapError, map_gpus

        try:
            topo = map_gpus(engine, gpus=recording.gpus, source="cmdline")
        except (TopologyError, GpuMapError) as e:
            raise InputError(str(e), path="--engine-cmdline") from e
        _check_gpus(topo, recording, "--engine-cmdline")
        return topo
    return recording.topology


def resolve_engine(
    args: argparse.Namespace,
    topology: Topology | None,
    meta: Mapping[str, Any] | None = None,
) -> EngineConfig | None:
    """The engine config: --engine-cmdline, else the command line the topology recorded.

    A training job's layout is read from the recording's `meta.training` (its
    config files were read where it ran, so its command line alone may not say).
    The version: --engine-version, else the `engine_version` a recording's header
    carries (`bubblewatch record` writes the discovered one).
    """
    version = getattr(args, "engine_version", None)
    if version is None and meta is not None and isinstance(meta.get("engine_version"), str):
        version = meta["engine_version"]
    engine = engine_from_cmdline(getattr(args, "engine_cmdline", None), version)
    if engine is not None:
        return engine
    recorded = _recorded_training(meta, topology)
    if recorded is not None or topology is None or not topology.argv:
        return recorded
    from bubblewatch.topology.cmdline import parse_engine_cmdline

    try:
        return parse_engine_cmdline(
            list(topology.argv), dict(topology.env), where="recording", version=version
        )
    except InputError as e:
        # A recorded command line we cannot parse still leaves the telemetry to analyse.
        log.warning("ignoring the recorded engine command line: %s", e)
        return None


def training_schedule(engine: EngineConfig | None) -> PipelineSchedule | None:
    """The schedule a training job's layout allows (None: not a training pipeline)."""
    if engine is None or engine.training is None:
        return None
    return engine.training.pipeline_schedule()


def resolve_schedule(
    args: argparse.Namespace,
    engine: EngineConfig | None,
    meta: Mapping[str, Any] | None,
    given: PipelineSchedule | None = None,
) -> PipelineSchedule | None:
    """The schedule a training pipeline's bubble is judged against.

    Precedence: `given` (--schedule), then the layout of --engine-cmdline, then
    the schedule the recording's header carries (`meta.schedule`: the
    simulator writes it), then the layout of the recorded launch.
    """
    if given is not None:
        return given
    if getattr(args, "engine_cmdline", None):
        return training_schedule(engine)
    recorded = recorded_schedule(meta)
    return recorded if recorded is not None else training_schedule(engine)


def recorded_schedule(meta: Mapping[str, Any] | None) -> PipelineSchedule | None:
    """The header's `meta.schedule`, or None (a malformed one is said and ignored)."""
    raw = None if meta is None else meta.get("schedule")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        log.warning("ignoring the recorded schedule: expected an object, got %r", raw)
        return None
    try:
        return PipelineSchedule.from_header(raw)
    except ValueError as e:
        log.warning("ignoring the recorded schedule: %s", e)
        return None


def _recorded_training(
    meta: Mapping[str, Any] | None, topology: Topology | None
) -> EngineConfig | None:
    raw = None if meta is None else meta.get("training")
    if not isinstance(raw, Mapping):
        return None
    from bubblewatch.topology.training import LayoutError, ParallelLayout, training_engine

    try:
        lay = ParallelLayout.from_dict(raw)
    except LayoutError as e:
        log.warning("ignoring the recorded training layout: %s", e)
        return None
    if topology is None:
        return training_engine(lay, (), {})
    return training_engine(lay, topology.argv, topology.env)


def _training_topology(cmdline: str, recording: Recording) -> Topology:
    """The first pipeline of a training launch given with --engine-cmdline."""
    from bubblewatch.topology.training import LocalFiles, training_from_cmdline

    words, env = _split_env(cmdline)
    job = training_from_cmdline(words, env, recording.gpus, files=LocalFiles())
    placed = [] if job is None else job.topologies()
    if not placed:
        raise InputError("the training launch places no rank on a GPU", path="--engine-cmdline")
    return placed[0][0]


def engine_from_cmdline(cmdline: str | None, version: str | None = None) -> EngineConfig | None:
    if not cmdline:
        return None
    from bubblewatch.topology.cmdline import parse_engine_cmdline

    try:
        words = shlex.split(cmdline)
    except ValueError as e:
        raise InputError(f"cannot split the command line: {e}", path="--engine-cmdline") from e
    # Leading VAR=value words are the engine's environment; the parser reads them.
    check_version(version)
    config = parse_engine_cmdline(words, where="--engine-cmdline", version=version)
    if config is None:
        from bubblewatch.topology.training import LocalFiles, training_from_cmdline

        argv, env = _split_env(cmdline)
        job = training_from_cmdline(argv, env, [], files=LocalFiles())
        if job is None:
            raise InputError(
                "not an SGLang, vLLM or TensorRT-LLM launch command, nor a training launch",
                path="--engine-cmdline",
            )
        return job.engine_config()
    return config


def _split_env(cmdline: str) -> tuple[list[str], dict[str, str]]:
    from bubblewatch.cli.topology import split_cmdline

    return split_cmdline(cmdline)


def _with_argv(topo: Topology, recorded: Topology | None) -> Topology:
    """Keep the recorded engine command line when only the sizes were overridden."""
    if recorded is None or not recorded.argv:
        return topo
    return Topology(
        stages=topo.stages,
        engine=recorded.engine,
        source=topo.source,
        argv=recorded.argv,
        env=recorded.env,
    )


def _check_gpus(topo: Topology, recording: Recording, where: str) -> None:
    missing = sorted(set(topo.gpus) - set(recording.series))
    if missing:
        have = ", ".join(str(g) for g in sorted(recording.series)) or "none"
        raise InputError(
            f"topology names GPU(s) {missing} that the recording does not have (it has {have})",
            path=where,
        )


def _note_left_out(topo: Topology, recording: Recording) -> None:
    """Say when --pp-size x --tp-size covers fewer GPUs than the recording has samples of.

    `--pp-size 3` on an 8-GPU trace analysed GPUs 0-2 without a word; the sizes
    still mean what they say (a job may use part of a host), but the GPUs left
    out are named on stderr.
    """
    left = [g for g, s in sorted(recording.series.items()) if len(s) and g not in topo.gpus]
    if left:
        print(
            f"bubblewatch: note: --pp-size/--tp-size {topo.pp_size} x {topo.tp_size} covers "
            f"GPU(s) {index_ranges(sorted(topo.gpus))}; the recording's GPU(s) "
            f"{index_ranges(left)} are not analysed (a --topology file names other GPUs)",
            file=sys.stderr,
        )


def check_version(version: str | None) -> None:
    """Refuse an --engine-version that is not a version (None: not given)."""
    from bubblewatch.topology.versions import normalise_version

    if version is not None and normalise_version(version) is None:
        raise InputError(f"not a version: {version!r} (e.g. 0.5.11)", path="--engine-version")
