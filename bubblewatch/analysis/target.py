"""What a window is analysed as: its topology, engine (and version) and training schedule.

Each is taken from what was given (a topology file, sizes, a launch command line,
a version, a schedule), else from discovery or what the recording carries (its
topology's recorded command line, the header's `engine_version`, `training`
layout and `schedule`). Every command and the daemon resolve through here, so
one recording is judged as the same job everywhere. Bad input raises InputError
naming the command-line option it came from.
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology, TopologyError, index_ranges
from bubblewatch.topology.engine_config import EngineConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """The job a window is judged as (None: unknown, the detector infers what it can)."""

    topology: Topology | None
    engine: EngineConfig | None
    schedule: PipelineSchedule | None = None


def resolve_target(
    recording: Recording,
    *,
    topology_file: str | None = None,
    pp_size: int | None = None,
    tp_size: int | None = None,
    cmdline: str | None = None,
    version: str | None = None,
    schedule: PipelineSchedule | None = None,
) -> Target:
    """Topology, engine and schedule of a recording, from what was given, else what it carries."""
    topo = resolve_topology(
        recording,
        topology_file=topology_file,
        pp_size=pp_size,
        tp_size=tp_size,
        cmdline=cmdline,
        version=version,
    )
    return target_for(recording.meta, topo, cmdline=cmdline, version=version, schedule=schedule)


def target_for(
    meta: Mapping[str, Any] | None,
    topology: Topology | None,
    *,
    cmdline: str | None = None,
    version: str | None = None,
    schedule: PipelineSchedule | None = None,
) -> Target:
    """Engine and schedule for a topology already known (discovered, recorded or given)."""
    engine = resolve_engine(topology, meta, cmdline=cmdline, version=version)
    sched = resolve_schedule(engine, meta, given=schedule, from_cmdline=bool(cmdline))
    return Target(topology, engine, sched)


def resolve_topology(
    recording: Recording,
    *,
    topology_file: str | None = None,
    pp_size: int | None = None,
    tp_size: int | None = None,
    cmdline: str | None = None,
    version: str | None = None,
) -> Topology | None:
    """Precedence: a topology file, then the sizes, then the command line, then the recording's."""
    if topology_file:
        from bubblewatch.topology.static import load_topology_file

        topo = load_topology_file(topology_file, recording.gpus)
        _check_gpus(topo, recording, topology_file)
        return topo
    if pp_size is not None or tp_size is not None:
        try:
            topo = Topology.from_sizes(
                1 if pp_size is None else pp_size,
                1 if tp_size is None else tp_size,
                source="cli",
            )
        except TopologyError as e:
            raise InputError(str(e), path="--pp-size/--tp-size") from e
        _check_gpus(topo, recording, "--pp-size/--tp-size")
        _note_left_out(topo, recording)
        return _with_argv(topo, recording.topology)
    engine = engine_from_cmdline(cmdline, version)
    if engine is not None and engine.training is not None:
        assert cmdline is not None
        topo = _training_topology(cmdline, recording)
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
    topology: Topology | None,
    meta: Mapping[str, Any] | None = None,
    *,
    cmdline: str | None = None,
    version: str | None = None,
) -> EngineConfig | None:
    """The engine config: `cmdline`, else the command line the topology recorded.

    A training job's layout is read from the recording's `meta.training` (its
    config files were read where it ran, so its command line alone may not say).
    The version: `version`, else the `engine_version` a recording's header
    carries (`bubblewatch record` writes the discovered one).
    """
    if version is None and meta is not None and isinstance(meta.get("engine_version"), str):
        version = meta["engine_version"]
    engine = engine_from_cmdline(cmdline, version)
    if engine is not None:
        return engine
    recorded = _recorded_training(meta, topology)
    if recorded is not None or topology is None or not topology.argv:
        return recorded
    from bubblewatch.topology.cmdline import parse_engine_cmdline

    argv, env = list(topology.argv), dict(topology.env)
    try:
        engine = parse_engine_cmdline(argv, env, where="recording", version=version)
        # A training launch (torchrun ...) gives its layout, as discovery reads it.
        return engine if engine is not None else training_from_argv(argv, env, where="recording")
    except InputError as e:
        # A recorded command line we cannot parse still leaves the telemetry to analyse.
        log.warning("ignoring the recorded engine command line: %s", e)
        return None


def training_from_argv(
    argv: Sequence[str], env: Mapping[str, str], *, where: str
) -> EngineConfig | None:
    """The training job a launch command line describes, read from it alone.

    Its config files are not read: they were where it ran, not where it is
    analysed (a recording) or simulated. Raises InputError for a launch that
    cannot be read; None for no training launch.
    """
    from bubblewatch.topology.training import LayoutError, training_from_cmdline
    from bubblewatch.topology.training.files import NoFiles

    try:
        job = training_from_cmdline(argv, env, [], files=NoFiles(), where=where)
    except LayoutError as e:
        raise InputError(str(e), path=where) from e
    return None if job is None else job.engine_config()


def training_schedule(engine: EngineConfig | None) -> PipelineSchedule | None:
    """The schedule a training job's layout allows (None: not a training pipeline)."""
    if engine is None or engine.training is None:
        return None
    return engine.training.pipeline_schedule()


def resolve_schedule(
    engine: EngineConfig | None,
    meta: Mapping[str, Any] | None,
    *,
    given: PipelineSchedule | None = None,
    from_cmdline: bool = False,
) -> PipelineSchedule | None:
    """The schedule a training pipeline's bubble is judged against.

    Precedence: `given` (--schedule), then the layout of a given command line
    (`from_cmdline`), then the schedule the recording's header carries
    (`meta.schedule`: the simulator writes it), then the layout of the recorded
    or discovered launch.
    """
    if given is not None:
        return given
    if from_cmdline:
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

    words, env = split_cmdline(cmdline)
    job = training_from_cmdline(words, env, recording.gpus, files=LocalFiles())
    placed = [] if job is None else job.topologies()
    if not placed:
        raise InputError("the training launch places no rank on a GPU", path="--engine-cmdline")
    return placed[0][0]


def engine_from_cmdline(cmdline: str | None, version: str | None = None) -> EngineConfig | None:
    """The engine a launch command line starts (None: no command line given)."""
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

        argv, env = split_cmdline(cmdline)
        job = training_from_cmdline(argv, env, [], files=LocalFiles())
        if job is None:
            raise InputError(
                "not an SGLang, vLLM or TensorRT-LLM launch command, nor a training launch",
                path="--engine-cmdline",
            )
        return job.engine_config()
    return config


def split_cmdline(text: str) -> tuple[list[str], dict[str, str]]:
    """Shell words of CMD; leading NAME=value words become the environment."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise InputError(f"cannot split the command line: {e}", path="--engine-cmdline") from e
    env: dict[str, str] = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return words, env


def check_version(version: str | None) -> None:
    """Refuse an --engine-version that is not a version (None: not given)."""
    from bubblewatch.engines.versions import normalise_version

    if version is not None and normalise_version(version) is None:
        raise InputError(f"not a version: {version!r} (e.g. 0.5.11)", path="--engine-version")


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
    """Say when the sizes cover fewer GPUs than the recording has samples of.

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
