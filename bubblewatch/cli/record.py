"""`bubblewatch record`: sample every GPU through NVML into a trace file."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from bubblewatch.cli._live import (
    add_sampling_args,
    discover_with_feed,
    open_nvml,
    read_engine_state,
    sample,
    sampler_config,
)
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.outputs import check_writable
from bubblewatch.sources.trace import TraceWriter


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Sample every GPU through NVML and write a bubblewatch trace "
        "(docs/trace-format.md), with the discovered topology and the engine's live "
        "settings in its header."
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="TRACE",
        help="trace file (.jsonl or .jsonl.gz; default bubblewatch-DATE-TIME.jsonl.gz)",
    )
    add_sampling_args(p, default_duration=None)
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = sampler_config(args)
    path = args.output or time.strftime("bubblewatch-%Y%m%d-%H%M%S.jsonl.gz")
    check_writable(path)  # a clear error now, not a traceback after opening the GPUs
    source = open_nvml(config)
    if source is None:
        return 1
    with source:
        found, feed = discover_with_feed(source, args, config.interval_s)
        if found.topology is None:
            print(
                "bubblewatch: topology unknown (no serving engine found); recording GPUs only",
                file=sys.stderr,
            )
        meta: dict[str, Any] = {
            "source": "nvml",
            "driver_version": source.driver_version,
            "interval_s": config.interval_s,
            "topology_method": found.method,
            "capabilities": {str(g): c.to_dict() for g, c in source.capabilities().items()},
            **found.meta(),
        }
        if found.warnings:
            meta["topology_warnings"] = found.warnings
        # The engine's live settings beside the samples (the cap a fix may have set live):
        # `analyze` of the trace joins them into the facts, as `diagnose` does live.
        _, said = read_engine_state(args, found.engine)
        if said is not None:
            meta["engine_live"] = said
        with TraceWriter(
            path, gpus=source.gpus(), topology=found.topology, meta=meta, flush_every=64
        ) as w:

            def write_samples(rows: list[Sample]) -> None:
                for r in sorted(rows, key=lambda r: (r.t_s, r.gpu)):
                    w.sample(r)

            def write_events(events: list[Event]) -> None:
                for e in events:
                    w.event(e)

            def write_load(rows: list[LoadSample]) -> None:
                for r in rows:
                    w.load(r)

            n = sample(
                source,
                args.duration,
                write_samples,
                write_events,
                progress=sys.stderr.isatty(),
                load=feed,
                on_load=write_load,
            )
            write_events(source.events())
            _, said_end = (
                read_engine_state(args, found.engine) if said is not None else (None, None)
            )
            summary = {
                "samples": n,
                "gpus": len(source.gpus()),
                "lost_gpus": list(source.lost_gpus()),
                "nvml_errors": source.errors.to_dict(),
                "engine_metrics": None if feed is None else feed.summary(),
            }
            if said_end is not None:
                summary["engine_live_end"] = said_end  # read again at the end: a change shows
            w.summary(summary)
    if args.json:
        json.dump({"path": path, **summary}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"wrote {n} samples from {summary['gpus']} GPUs to {path}")
    return 0
