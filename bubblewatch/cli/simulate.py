"""`bubblewatch simulate` and `bubblewatch scenarios`: run the pipeline simulator to a trace."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from bubblewatch.errors import InputError
from bubblewatch.outputs import check_writable, replacing
from bubblewatch.safeyaml import YamlError, yaml_value
from bubblewatch.sources.smi_writer import write_nvidia_smi
from bubblewatch.sources.trace import write_trace

if TYPE_CHECKING:
    from bubblewatch.sim import Scenario, TrainingScenario


FORMATS = ("trace", "nvidia-smi", "nvidia-smi-bare")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Simulate a scenario (built-in name or YAML file) and write a trace."
    p.add_argument("scenario", metavar="SCENARIO|FILE", help="built-in name or path to a YAML file")
    p.add_argument("--duration", type=float, default=60.0, metavar="S", help="seconds (default 60)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    p.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help="NVML poll interval (default 1; a training pipeline: 0.125, as the daemon "
        "samples one)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set workload.concurrency=1 (repeatable)",
    )
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="trace file (.jsonl[.gz])")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="trace",
        help="trace (default); nvidia-smi: the CSV `nvidia-smi --query-gpu=... --format=csv "
        "-lms N` prints (power, utilization.gpu, clocks, temperature, no SM activity, no "
        "topology); nvidia-smi-bare: timestamp, index, power.draw and utilization.gpu only",
    )
    p.add_argument("--timeline", metavar="FILE.bwtl", help="also write the physical timeline")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run_simulate)


def add_scenarios_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=run_scenarios)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values are read as YAML scalars (numbers, true/false, lists)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set expects KEY=VALUE, got {item!r}", field="--set")
        try:
            out[key.strip()] = yaml_value(value)
        except YamlError as e:
            raise InputError(
                f"cannot read value {value[:80]!r}: {e.reason}", field=key.strip()
            ) from None
    return out


def poll_interval(sc: Scenario | TrainingScenario, given: float | None) -> float:
    """`given`, else what bubblewatch samples such a job at: 1 s, a training pipeline 0.125 s.

    The daemon samples a training pipeline faster (bubblewatch.daemon.loop.sampling): its
    steps last 100 ms to seconds, and at 1 s its schedule cannot be judged.
    """
    if given is not None:
        return given
    from bubblewatch.sim import TrainingScenario as Training

    if isinstance(sc, Training) and sc.job.schedule != "none" and sc.job.pp_size > 1:
        from bubblewatch.daemon.loop.sampling import TRAINING_INTERVAL_S

        return TRAINING_INTERVAL_S
    return 1.0


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"bubblewatch: {msg}", file=sys.stderr, flush=True)


def run_simulate(args: argparse.Namespace) -> int:
    for path in (args.output, args.timeline):
        if path:
            check_writable(path)  # before the work, not after it
    from bubblewatch.sim import (  # scipy: only here
        TrainingScenario,
        Truth,
        apply_overrides,
        load_scenario,
        observe,
        simulate,
    )

    sc = load_scenario(args.scenario)
    overrides = parse_sets(args.set)
    if overrides:
        sc = apply_overrides(sc, overrides)
    args.interval = poll_interval(sc, args.interval)
    _progress(f"simulating {sc.name} for {args.duration:g} s ...")
    t0 = time.perf_counter()

    def summary(tokens_per_s: float, truth: Truth) -> dict[str, Any]:
        return {
            "scenario": sc.name,
            "tokens_per_s": round(tokens_per_s, 3),
            "duration_s": args.duration,
            "seed": args.seed,
            "truth": truth.to_dict(),
        }

    if args.timeline or args.format != "trace" or isinstance(sc, TrainingScenario):
        # The whole timeline is written (or a training job simulated, or a CSV written):
        # the run is held whole.
        res = simulate(sc, args.duration, args.seed)
        rec = observe(res, interval_s=args.interval, seed=args.seed)
        _progress(f"simulated in {time.perf_counter() - t0:.1f} s; writing {args.output}")
        written = summary(res.tokens_per_s, res.truth)
        with replacing([args.output, *([args.timeline] if args.timeline else [])]) as temps:
            epoch = float(rec.meta.get("sim_t0_epoch_s", 0.0))
            per_s = () if res.truth_series is None else res.truth_series.records(epoch)
            if args.format == "trace":
                write_trace(temps[0], rec, summary=written, extensions=per_s)
            else:
                write_nvidia_smi(rec, temps[0], bare=args.format == "nvidia-smi-bare")
            if args.timeline:
                res.timeline.write(temps[1])
        tokens_per_s, truth, n_samples, n_gpus = (
            res.tokens_per_s,
            res.truth,
            rec.n_samples,
            len(rec.gpus),
        )
    else:
        from bubblewatch.sim.stream import simulate_to_trace

        with replacing([args.output]) as temps:
            run = simulate_to_trace(
                sc,
                temps[0],
                duration_s=args.duration,
                seed=args.seed,
                interval_s=args.interval,
                summary=summary,
            )
        _progress(f"simulated and written in {time.perf_counter() - t0:.1f} s")
        tokens_per_s, truth, n_samples, n_gpus = (
            run.tokens_per_s,
            run.truth,
            run.n_samples,
            run.n_gpus,
        )
        written = summary(tokens_per_s, truth)
    if args.json:
        print(json.dumps({**written, "trace": args.output, "timeline": args.timeline}))
    else:
        print(
            f"{sc.name}: {tokens_per_s:.1f} tok/s over {args.duration:g} s, "
            f"{n_samples} samples from {n_gpus} GPUs -> {args.output}"
        )
        for st in truth.stages[:16]:
            bar = "#" * round(st.busy_ratio * 20)
            print(
                f"  r{st.replica} stage {st.stage:>2} busy {st.busy_ratio:5.2f} |{bar:<20}| "
                f"spin {st.spin_ratio:4.2f}  {st.power_w:5.0f} W"
            )
    return 0


def run_scenarios(args: argparse.Namespace) -> int:
    from bubblewatch.sim import list_scenarios

    items = list_scenarios()
    if args.json:
        print(json.dumps([{"name": n, "description": d} for n, d in items]))
    else:
        width = max((len(n) for n, _ in items), default=0)
        for n, d in items:
            print(f"{n:<{width}}  {d}")
    return 0
