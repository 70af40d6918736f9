"""`bubblewatch fleet --prometheus URL [--pipeline ID]`: pipelines that span hosts, seen whole.

Each host's daemon sees only its own stages; Prometheus sees every host.
Without `--pipeline` this lists the pipelines the daemons export, with their
hosts, stages and each host's own verdict. With `--pipeline ID` it reads the
per-GPU series of all the pipeline's hosts (`query_range`), orders the GPUs by
the global stage the daemons export, runs the detector across the whole
pipeline, and prints the same report as `analyze`. docs/fleet.md says what
such a cross-host view can and cannot conclude.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bubblewatch.analysis import Target, analyse_window, resolve_schedule
from bubblewatch.cli._inputs import add_gpu_model_arg, named_gpus
from bubblewatch.cli._output import add_output_args, emit, rules_of
from bubblewatch.cli._progress import Progress, fetch_limits, query_progress
from bubblewatch.cli._relative_times import accept_relative_times
from bubblewatch.errors import InputError
from bubblewatch.sources.prometheus_history import (
    PrometheusClient,
    RangeSeries,
    load_prometheus,
    normalize_selector,
    parse_time,
)
from bubblewatch.sources.prometheus_history.fetch import choose_step, promql_string
from bubblewatch.sources.prometheus_history.fleet import (
    FleetPipeline,
    engine_from_info,
    host_matcher,
    host_of,
    join_pipeline,
    pipelines_from_info,
)

GPU_INFO = "bubblewatch_gpu_info"
ENGINE_INFO = "bubblewatch_engine_info"
VERDICT = "bubblewatch_pipeline_verdict"
CONCURRENCY = "bubblewatch_pipeline_concurrency"
# Points the label queries ask for over the range: labels, not values, matter there.
_LABEL_POINTS = 120
# The scrape interval is measured over at most this trailing span.
_INTERVAL_PROBE_S = 120.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Join each host's bubblewatch series in Prometheus into whole pipelines "
        "and diagnose one across all its hosts."
    )
    p.add_argument("--prometheus", metavar="URL", required=True, help="Prometheus base URL")
    p.add_argument("--pipeline", metavar="ID", help="the pipeline to diagnose (default: list)")
    p.add_argument(
        "--start",
        default="-10m",
        metavar="T",
        help="RFC 3339, epoch, now-10m or -10m (default -10m)",
    )
    p.add_argument("--end", default="now", metavar="T", help="(default now)")
    p.add_argument(
        "--step",
        type=float,
        metavar="S",
        help="grid step in seconds (default: twice the measured scrape interval, at least 1, "
        "and coarse enough for at most 11,000 points per series over the range)",
    )
    p.add_argument(
        "--selector",
        help='extra label matchers for every series, e.g. job="bubblewatch" or a cluster label',
    )
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per query (30)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="range queries in flight at once (default 4)",
    )
    add_gpu_model_arg(p)
    add_output_args(p)
    accept_relative_times(p)  # --start -10m
    p.set_defaults(func=run)


@dataclass(frozen=True)
class _Range:
    start_s: float
    end_s: float


def run(args: argparse.Namespace) -> int:
    now = time.time()
    try:
        rng = _Range(parse_time(args.start, now), parse_time(args.end, now))
        selector = normalize_selector(args.selector)
    except ValueError as e:
        raise InputError(str(e), path="--start/--end/--selector") from None
    if not rng.end_s > rng.start_s:
        raise InputError(
            f"--end ({rng.end_s:.3f}) must be after --start ({rng.start_s:.3f})", path="--start"
        )
    if args.step is not None and not (args.step > 0 and math.isfinite(args.step)):
        raise InputError(f"must be > 0 seconds, got {args.step}", path="--step")
    limits = fetch_limits(args.concurrency)
    client = PrometheusClient(args.prometheus, timeout_s=args.timeout)
    progress = Progress.for_args(args)
    progress(f"querying {client.where}: pipelines ...", force=True)
    label_step = max((rng.end_s - rng.start_s) / _LABEL_POINTS, 1.0)
    info = _labels(client.query_range(_sel(GPU_INFO, selector), rng.start_s, rng.end_s, label_step))
    engines = _labels(
        client.query_range(_sel(ENGINE_INFO, selector), rng.start_s, rng.end_s, label_step)
    )
    pipelines = pipelines_from_info(info, engines)
    if args.pipeline is None:
        progress.done()
        return _list(args, client, rng, pipelines, selector=selector, label_step=label_step)
    pipe = pipelines.get(args.pipeline)
    if pipe is None:
        progress.done()
        known = ", ".join(repr(p) for p in pipelines) or "none"
        raise InputError(
            f"no pipeline {args.pipeline!r} in {GPU_INFO} between the start and end "
            f"(pipelines seen: {known})",
            path=client.where,
            field="--pipeline",
        )
    step = args.step or _auto_step(client, rng, selector, pipe)
    hosts = host_matcher(pipe)
    rec = load_prometheus(
        args.prometheus,
        rng.start_s,
        rng.end_s,
        step,
        ", ".join(m for m in (selector, hosts) if m),
        dialect="bubblewatch",
        timeout_s=args.timeout,
        now_s=now,
        limits=limits,
        on_progress=query_progress(progress, client.where),
    )
    progress.done(
        f"pipeline {pipe.id}: {len(pipe.stages)} stages on {len(pipe.hosts)} host(s), "
        f"step {step:g} s"
    )
    joined = named_gpus(join_pipeline(rec, pipe), args)
    # The engine is what the daemons exported (never a command line); its schedule as anywhere.
    engine = engine_from_info(engines, pipe.id)
    target = Target(joined.topology, engine, resolve_schedule(engine, joined.meta))
    result = analyse_window(joined, target, rules=rules_of(args))
    extra = {"fleet": {**pipe.to_dict(), "step_s": step, "gpu_index": _gpu_index(joined)}}
    return emit(args, joined, result, source=f"fleet {pipe.id}", extra=extra)


def _sel(name: str, selector: str, more: str = "") -> str:
    return f"{name}{{{', '.join(m for m in (selector, more) if m)}}}"


def _labels(series: Sequence[RangeSeries]) -> list[Mapping[str, str]]:
    """Label sets ordered by when each series was last seen (latest last)."""
    return [
        s.labels for s in sorted(series, key=lambda s: float(s.t_s[-1]) if len(s.t_s) else -1.0)
    ]


def _auto_step(client: PrometheusClient, rng: _Range, selector: str, pipe: FleetPipeline) -> float:
    """Twice the slowest host's scrape interval (so every step holds a scrape), >= 1 s.

    Over a long range, coarser: the nice step that keeps 11,000 points per series.
    """
    span = min(_INTERVAL_PROBE_S, rng.end_s - rng.start_s)
    info = _sel(GPU_INFO, selector, f"pipeline={promql_string(pipe.id)}")
    q = f"count_over_time({info}[{span:g}s])"
    res = client.query_range(q, rng.end_s - 1.0, rng.end_s, 1.0)
    counts = [float(v) for s in res for v in s.values if v > 1]
    if not counts:
        return max(1.0, (rng.end_s - rng.start_s) / 200.0)
    interval = span / min(counts)
    scrape_step = float(max(1.0, round(2.0 * interval, 3)))
    range_step = choose_step(rng.start_s, rng.end_s, min_step_s=1.0)
    return max(scrape_step, range_step)


def _gpu_index(rec: Any) -> list[dict[str, Any]]:
    """Which host and host-local GPU each GPU index of the report stands for."""
    meta = rec.meta.get("prometheus", {})
    stage_of = (
        {} if rec.topology is None else {g: rec.topology.stage_of(g) for g in rec.topology.gpus}
    )
    return [
        {
            "index": g["index"],
            "host": g["host"],
            "gpu": g["local_index"],
            "stage": stage_of.get(g["index"]),
        }
        for g in meta.get("gpus", [])
        if g["index"] in stage_of
    ]


# -- listing ----------------------------------------------------------------------


def _list(
    args: argparse.Namespace,
    client: PrometheusClient,
    rng: _Range,
    pipelines: Mapping[str, FleetPipeline],
    *,
    selector: str,
    label_step: float,
) -> int:
    verdicts = _last_values(
        client.query_range(f"{_sel(VERDICT, selector)} == 1", rng.start_s, rng.end_s, label_step),
        "verdict",
    )
    concurrency = _last_values(
        client.query_range(_sel(CONCURRENCY, selector), rng.start_s, rng.end_s, label_step), None
    )
    views = {
        p.id: [
            _HostView(
                host=h,
                stages=tuple(sorted({g.stage for g in p.gpus if g.host == h})),
                gpus=tuple(sorted(g.gpu for g in p.gpus if g.host == h)),
                verdict=verdicts.get((p.id, h)),
                concurrency=concurrency.get((p.id, h)),
            )
            for h in p.hosts
        ]
        for p in pipelines.values()
    }
    if args.json:
        rows = [
            {**p.to_dict(), "per_host": [v.to_dict() for v in views[p.id]]}
            for p in pipelines.values()
        ]
        json.dump({"prometheus": client.where, "pipelines": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not pipelines:
        print(f"no pipelines in {GPU_INFO} at {client.where} in the range")
        return 0
    for p in pipelines.values():
        missing = p.missing_stages
        state = f"stages {_span(p.stages)}" + (f", MISSING {_span(missing)}" if missing else "")
        pp = f" (engine pp_size {p.engine_pp_size})" if p.engine_pp_size else ""
        print(f"{p.id}: {len(p.hosts)} host(s), {state}{pp}")
        for v in views[p.id]:
            conc = "" if v.concurrency is None else f", concurrency {v.concurrency:.2f}"
            print(
                f"  {v.host}: stages {_span(v.stages)} on GPU(s) {','.join(map(str, v.gpus))}; "
                f"host alone: {v.verdict or 'no verdict'}{conc}"
            )
    print("\ndiagnose one across its hosts: bubblewatch fleet --prometheus URL --pipeline ID")
    return 0


@dataclass(frozen=True)
class _HostView:
    """What one host's daemon exported about its part of a pipeline."""

    host: str
    stages: tuple[int, ...]
    gpus: tuple[int, ...]
    verdict: str | None
    concurrency: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "stages": list(self.stages),
            "gpus": list(self.gpus),
            "verdict": self.verdict,
            "concurrency": self.concurrency,
        }


def _last_values(series: Sequence[RangeSeries], label: str | None) -> dict[tuple[str, str], Any]:
    """(pipeline, host) -> the label's value (or the value) of the latest point."""
    best: dict[tuple[str, str], tuple[float, Any]] = {}
    for s in series:
        if not len(s.t_s):
            continue
        key = (s.labels.get("pipeline", ""), host_of(s.labels))
        t = float(s.t_s[-1])
        value = s.labels.get(label, "") if label else float(s.values[-1])
        if key not in best or t >= best[key][0]:
            best[key] = (t, value)
    return {k: v for k, (_, v) in best.items()}


def _span(values: Sequence[int]) -> str:
    if not values:
        return "none"
    if list(values) == list(range(values[0], values[0] + len(values))) and len(values) > 1:
        return f"{values[0]}-{values[-1]}"
    return ",".join(map(str, values))


__all__ = ["add_arguments", "run"]
