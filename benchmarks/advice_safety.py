"""Advice safety: does any recommendation bubblewatch renders make things worse, at any load?

    .venv/bin/python benchmarks/advice_safety.py [--scenarios a,b] [--concurrency 1,8,64,256]
        [--graphs on,off] [--duration 30] [--version 0.5.11] [--set KEY=VALUE] [--out FILE]
    .venv/bin/python benchmarks/advice_safety.py --knobs --duration 120

For each serving scenario x concurrency C x CUDA graphs on/off, the
simulated engine is analysed as `analyze` would (telemetry observed at 1 s,
the detector, the shipped rules, with the scenario's command line and
`--version`), then every recommendation whose fix changes the command line
is applied alone, and all compatible ones together (the report's "all
together" command), by reading the corrected command line back into the
scenario's settings. Each variant runs in the simulator at the same C and
seed as the unchanged run; the table gives tokens/s and TTFT and ITL p50/p99
of each against the unchanged run. A row fails the safety bound when
throughput falls more than 2 % or a p99 latency rises more than 5 %.
Exits 1 when any row fails.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _report import emit

from bubblewatch.cli.simulate import parse_sets
from bubblewatch.detect import diagnose
from bubblewatch.rules import load_rules, recommend
from bubblewatch.rules.evaluate import combined_fix
from bubblewatch.rules.model import RuleSet
from bubblewatch.rules.render import RenderedFix
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.replica import run_replica
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sim.simulate import replica_phases, replica_stages
from bubblewatch.sim.spec import Scenario
from bubblewatch.topology.cmdline import parse_engine_cmdline

# Serving scenarios with a pipeline or the TP baseline; the idle and single-request ones
# are the same engines as these at other loads (C is swept here).
SCENARIOS = ("pp8-serialized", "pp8-async", "pp2-async", "pp4-imbalanced", "pp16-serialized", "tp8")
CONCURRENCY = (1, 8, 64, 256, 1024)
THROUGHPUT_MIN_RATIO = 0.98
P99_MAX_RATIO = 1.05


@dataclass(frozen=True)
class Perf:
    """What a client sees: tokens/s and latency percentiles (seconds)."""

    tokens_per_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    e2e_p50_s: float
    e2e_p99_s: float


@dataclass(frozen=True)
class Row:
    scenario: str
    concurrency: int
    graphs: bool
    variant: str  # a rule name, "all together", or "unchanged"
    perf: Perf
    base: Perf

    @property
    def throughput_ratio(self) -> float:
        return self.perf.tokens_per_s / max(self.base.tokens_per_s, 1e-12)

    def p99_ratio(self, name: str) -> float:
        b = getattr(self.base, name)
        return float(getattr(self.perf, name) / b) if b > 0 else 1.0

    @property
    def safe(self) -> bool:
        return (
            self.throughput_ratio >= THROUGHPUT_MIN_RATIO
            and self.p99_ratio("e2e_p99_s") <= P99_MAX_RATIO
            and self.p99_ratio("ttft_p99_s") <= P99_MAX_RATIO
        )


def measure(sc: Scenario, duration_s: float, seed: int) -> Perf:
    """The scheduler and pipeline alone (no telemetry): tokens/s, TTFT and ITL percentiles."""
    tokens = 0
    ttft: list[np.ndarray[Any, Any]] = []
    itl: list[np.ndarray[Any, Any]] = []
    e2e: list[np.ndarray[Any, Any]] = []
    for r in range(sc.parallel.dp_size):
        rng = np.random.default_rng([seed, r])
        rep = run_replica(sc, replica_stages(sc, r), replica_phases(sc, r), duration_s, rng)
        tokens += rep.tokens
        ttft.append(rep.ttft_s)
        itl.append(rep.itl_s)
        e2e.append(rep.e2e_s)
    t = np.concatenate(ttft)
    i = np.concatenate(itl)
    e = np.concatenate(e2e)

    def pct(a: np.ndarray[Any, Any], q: float) -> float:
        return float(np.percentile(a, q)) if a.size else float("nan")

    return Perf(
        tokens / duration_s,
        pct(t, 50),
        pct(t, 99),
        pct(i, 50),
        pct(i, 99),
        pct(e, 50),
        pct(e, 99),
    )


def overrides_for(rendered: RenderedFix, version: str | None) -> dict[str, Any]:
    """The scenario settings a corrected SGLang/vLLM command line stands for."""
    env = dict(rendered.env)
    cfg = parse_engine_cmdline(list(rendered.argv), env, version=version)
    if cfg is None:
        raise ValueError(f"not an engine command line: {rendered.command}")
    out: dict[str, Any] = {
        "parallel.pp_size": cfg.pp_size,
        "parallel.tp_size": cfg.tp_size,
        "parallel.cuda_graph": bool(cfg.cuda_graph),
        "parallel.layer_partition": (
            None if cfg.layer_partition is None else list(cfg.layer_partition)
        ),
    }
    if cfg.name == "sglang":
        out["parallel.pp_async_batch_depth"] = cfg.pp_async_batch_depth or 0
        out["parallel.pp_max_micro_batch_size"] = cfg.pp_max_micro_batch_size
    if cfg.name == "vllm":
        # vLLM's batch queue follows its flags (--async-scheduling): the command line itself.
        out["engine_argv"] = list(rendered.argv)
    if cfg.max_running_requests is not None:
        out["parallel.max_running_requests"] = cfg.max_running_requests
    return out


def variants(
    sc: Scenario, duration_s: float, seed: int, version: str | None, rules: RuleSet
) -> list[tuple[str, dict[str, Any]]]:
    """What bubblewatch recommends for `sc` (analysed as `analyze` does), as scenario overrides."""
    res = simulate(sc, duration_s, seed)
    rec = observe(res, interval_s=1.0, seed=seed)
    topo = res.topology
    if topo is None:
        return []
    engine = parse_engine_cmdline(list(topo.argv), dict(topo.env), version=version)
    diag = diagnose(rec, topo)
    recs = recommend(diag, engine, topo, rules=rules, gpus=rec.gpus, load=rec.load)
    out = []
    for r in recs:
        if r.rendered is not None and r.rendered.valid:
            out.append((r.rule, overrides_for(r.rendered, version)))
    together = combined_fix(recs)
    if together is not None and together.valid:
        out.append(("all together", overrides_for(together, version)))
    return out


def run(
    scenarios: tuple[str, ...],
    concurrency: tuple[int, ...],
    graphs: tuple[bool, ...],
    *,
    duration_s: float,
    seed: int = 0,
    version: str | None = "0.5.11",
    overrides: dict[str, Any] | None = None,
) -> list[Row]:
    """Every cell of the grid: the unchanged run, then each recommendation applied."""
    rules = load_rules()
    rows: list[Row] = []
    for name in scenarios:
        base_sc = load_scenario(name)
        assert isinstance(base_sc, Scenario), f"{name} is not a serving scenario"
        for c in concurrency:
            for g in graphs:
                sc = apply_overrides(
                    base_sc,
                    {**(overrides or {}), "workload.concurrency": c, "parallel.cuda_graph": g},
                )
                base = measure(sc, duration_s, seed)
                rows.append(Row(name, c, g, "unchanged", base, base))
                for rule, ov in variants(sc, duration_s, seed, version, rules):
                    perf = measure(apply_overrides(sc, ov), duration_s, seed)
                    rows.append(Row(name, c, g, rule, perf, base))
    return rows


def markdown(rows: list[Row]) -> list[str]:
    lines = [
        "| scenario | C | graphs | recommendation | tokens/s | x tokens/s | TTFT p50 / p99 s "
        "| x TTFT p99 | ITL p50 / p99 ms | x ITL p99 | latency p50 / p99 s | x latency p99 "
        "| safe |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r.perf
        lines.append(
            f"| {r.scenario} | {r.concurrency} | {'on' if r.graphs else 'off'} | {r.variant} "
            f"| {p.tokens_per_s:.0f} | {r.throughput_ratio:.2f} "
            f"| {p.ttft_p50_s:.2f} / {p.ttft_p99_s:.2f} | {r.p99_ratio('ttft_p99_s'):.2f} "
            f"| {1e3 * p.itl_p50_s:.1f} / {1e3 * p.itl_p99_s:.1f} | {r.p99_ratio('itl_p99_s'):.2f} "
            f"| {p.e2e_p50_s:.2f} / {p.e2e_p99_s:.2f} | {r.p99_ratio('e2e_p99_s'):.2f} "
            f"| {'yes' if r.safe else 'NO'} |"
        )
    return lines


def summary(rows: list[Row]) -> list[str]:
    """Per recommendation: how many cells it fired in and its worst ratios over them."""
    lines = [
        "| recommendation | cells | min x tokens/s | max x TTFT p99 | max x latency p99 "
        "| max x ITL p99 |",
        "|---|---|---|---|---|---|",
    ]
    names = sorted({r.variant for r in rows if r.variant != "unchanged"})
    for name in names:
        rs = [r for r in rows if r.variant == name]
        lines.append(
            f"| {name} | {len(rs)} | {min(r.throughput_ratio for r in rs):.2f} "
            f"| {max(r.p99_ratio('ttft_p99_s') for r in rs):.2f} "
            f"| {max(r.p99_ratio('e2e_p99_s') for r in rs):.2f} "
            f"| {max(r.p99_ratio('itl_p99_s') for r in rs):.2f} |"
        )
    return lines


KNOBS = (
    ("default", lambda c: {}),
    ("cap ceil(C/8)", lambda c: {"parallel.pp_max_micro_batch_size": max(-(-c // 8), 1)}),
    ("cap 1", lambda c: {"parallel.pp_max_micro_batch_size": 1}),
    ("prefill-max 1", lambda c: {"parallel.prefill_max_requests": 1}),
    ("prefill-max 2", lambda c: {"parallel.prefill_max_requests": 2}),
)


def knobs(duration_s: float, seed: int) -> list[str]:
    """The fill knobs side by side on pp8-serialized: tokens/s, graphs off / on (docs/rules.md)."""
    base = load_scenario("pp8-serialized")
    assert isinstance(base, Scenario)
    lines = ["| C | " + " | ".join(n for n, _ in KNOBS) + " |", "|---" * (len(KNOBS) + 1) + "|"]
    for c in (8, 64, 256):
        cells = []
        for _, ov in KNOBS:
            tps = [
                measure(
                    apply_overrides(
                        base, {"workload.concurrency": c, "parallel.cuda_graph": g, **ov(c)}
                    ),
                    duration_s,
                    seed,
                ).tokens_per_s
                for g in (False, True)
            ]
            cells.append(f"{tps[0]:.0f} / {tps[1]:.0f}")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return lines


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--concurrency", default="1,8,64,256", help="C values (1024 is slow)")
    ap.add_argument("--graphs", default="off,on")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--version", default="0.5.11", help="engine version the rules render for")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="scenario override"
    )
    ap.add_argument(
        "--knobs", action="store_true", help="only the fill knobs side by side (docs/rules.md)"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.knobs:
        emit(knobs(args.duration, args.seed), args.out)
        return 0
    rows = run(
        _csv(args.scenarios),
        tuple(int(c) for c in _csv(args.concurrency)),
        tuple(g == "on" for g in _csv(args.graphs)),
        duration_s=args.duration,
        seed=args.seed,
        version=args.version or None,
        overrides=parse_sets(args.set),
    )
    lines = [*summary(rows), "", *markdown(rows)]
    unsafe = [r for r in rows if not r.safe]
    lines.append("")
    lines.append(
        f"{len(rows)} rows, {len(unsafe)} outside the bound (tokens/s >= x{THROUGHPUT_MIN_RATIO}, "
        f"p99 request latency and TTFT <= x{P99_MAX_RATIO}); {args.duration:g} s simulated "
        "per run, "
        f"{time.perf_counter() - t0:.0f} s wall"
    )
    emit(lines, args.out)
    return 1 if unsafe else 0


if __name__ == "__main__":
    raise SystemExit(main())
