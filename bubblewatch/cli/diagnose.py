"""`bubblewatch diagnose`: sample the live GPUs (or a simulation), then report the verdict."""

from __future__ import annotations

import argparse
import sys

from bubblewatch.analysis import analyse_window, target_for
from bubblewatch.cli._inputs import target_args
from bubblewatch.cli._live import (
    add_sampling_args,
    discover_with_feed,
    open_nvml,
    read_engine_state,
    sample,
    sampler_config,
)
from bubblewatch.cli._output import add_output_args, emit, rules_of
from bubblewatch.errors import InputError
from bubblewatch.model.recording import Recording, RecordingBuilder
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.engine_state import recorded_state


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Sample every GPU through NVML (or run a simulated scenario), then "
        "print the detector's report."
    )
    add_sampling_args(p, default_duration=30.0)
    p.add_argument(
        "--simulate",
        metavar="SCENARIO",
        help="diagnose a simulated scenario instead of this host (e.g. pp8-serialized)",
    )
    p.add_argument("--pp-size", type=int, help="pipeline stages, when discovery finds no engine")
    p.add_argument("--tp-size", type=int, default=1, help="GPUs per stage (with --pp-size)")
    p.add_argument(
        "--engine-cmdline", metavar="CMD", help="the engine's launch command (recommendations)"
    )
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = sampler_config(args)
    if args.simulate:
        recording = _simulated(args.simulate, args.duration, args.interval)
        topology, where = recording.topology, args.simulate
    else:
        source = open_nvml(config)
        if source is None:
            return 1
        builder = RecordingBuilder()
        with source:
            found, feed = discover_with_feed(source, args, config.interval_s)
            for g in source.gpus():
                builder.add_gpu(g)
            topology = found.topology
            if topology is None and args.pp_size is not None:
                topology = _given_topology(args.pp_size, args.tp_size)
            builder.topology = topology
            if topology is None and not args.json:
                print(
                    "bubblewatch: topology unknown (no serving engine found); "
                    "the detector infers stages from the telemetry",
                    file=sys.stderr,
                )

            def add_events(events: list[Event]) -> None:
                for e in events:
                    builder.add_event(e)

            def add_samples(rows: list[Sample]) -> None:
                builder.extend(rows)

            def add_load(rows: list[LoadSample]) -> None:
                for r in rows:
                    builder.add_load(r)

            sample(
                source,
                args.duration,
                add_samples,
                add_events,
                progress=sys.stderr.isatty() and not args.json,
                load=feed,
                on_load=add_load,
            )
            builder.meta.update(source="nvml", driver_version=source.driver_version)
            builder.meta["nvml_errors"] = source.errors.to_dict()
            builder.meta.update(found.meta())
            if feed is not None:
                builder.meta["engine_metrics"] = feed.summary()
        recording, where = builder.build(), "live NVML"
        return _report(recording, topology, args, where, read_live=True)
    return _report(recording, topology, args, where)


def _given_topology(pp_size: int, tp_size: int) -> Topology:
    try:
        return Topology.from_sizes(pp_size, tp_size, source="cli")
    except TopologyError as e:
        raise InputError(str(e), path="--pp-size/--tp-size") from e


def _simulated(name: str, duration_s: float | None, interval_s: float | None) -> Recording:
    """What polling NVML every `interval_s` would have seen in a simulated scenario."""
    from bubblewatch.cli.simulate import poll_interval
    from bubblewatch.sim import load_scenario, observe, simulate

    scenario = load_scenario(name)
    result = simulate(scenario, duration_s if duration_s is not None else 30.0)
    return observe(result, interval_s=poll_interval(scenario, interval_s))


def _report(
    recording: Recording,
    topology: Topology | None,
    args: argparse.Namespace,
    where: str,
    *,
    read_live: bool = False,
) -> int:
    """The report; `read_live`: the engine runs here, read its live settings back."""
    # A training job's schedule (its layout, or a simulated trace's header) is what its
    # measured bubble is judged against.
    target = target_for(recording.meta, topology, **target_args(args))
    state, said = read_engine_state(args, target.engine) if read_live else (None, None)
    if not read_live:
        state = recorded_state(recording.meta)  # a trace `record` wrote holds a snapshot
    result = analyse_window(recording, target, rules=rules_of(args), live=state)
    shown = ("interconnect", "engine_metrics", "engine_live")  # engine_live: a recorded snapshot
    live = {k: recording.meta[k] for k in shown if k in recording.meta}
    if said is not None:
        live["engine_live"] = said
    if not args.json:
        for e in recording.events:
            print(f"event: {e.kind} gpu={e.gpu} {dict(e.detail)}", file=sys.stderr)
        if "engine_metrics" in live and not live["engine_metrics"]["samples"]:
            why = live["engine_metrics"]["last_error"] or "no answer"
            print(f"bubblewatch: engine load unknown ({why})", file=sys.stderr)
        if said is not None and state is None:
            print(f"bubblewatch: engine settings not read back ({said['error']})", file=sys.stderr)
    events = [
        {"t": e.t_s, "kind": e.kind, "gpu": e.gpu, "detail": dict(e.detail)}
        for e in recording.events
    ]
    return emit(args, recording, result, source=where, extra={"events": events, **live})
