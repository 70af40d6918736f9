"""Calibrate the simulator against the seed, and predict what each candidate fix does.

    .venv/bin/python benchmarks/calibrate.py [--duration 60] [--seed 0] [--json]
    .venv/bin/python benchmarks/calibrate.py --predict [--markdown]

Calibration: simulated tokens/s of PP8 serialized (graphs off) and TP8 at C=1
and C=8 next to the seed's measurements, the PP8/TP8 ratios, and PP8's mean 1 s
average power per GPU (the seed saw 150-200 W of 600 W). Exits 1 when a
calibration bound is not met.

`--predict`: the seed case (pp8-serialized, requests arriving together) with
each candidate fix applied, side by side: tokens/s, micro-batches in flight,
summed stage busy time, power, and the gain over the seed at the same C.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bubblewatch.model.metrics import Metric
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides

SEED_TOKENS_PER_S = {("pp8", 1): 24.7, ("pp8", 8): 95.6, ("tp8", 1): 98.0, ("tp8", 8): 1291.0}
SEED_POWER_BAND_W = (150.0, 200.0)
CASES = (("pp8", "pp8-serialized"), ("tp8", "tp8"))


@dataclass(frozen=True)
class Row:
    case: str
    scenario: str
    concurrency: int
    sim_tokens_per_s: float
    seed_tokens_per_s: float
    mean_power_w: float
    wall_s: float


def run(duration_s: float, seed: int) -> list[Row]:
    rows = []
    for case, name in CASES:
        sc = load_scenario(name)
        for c in (1, 8):
            t0 = time.perf_counter()
            res = simulate(apply_overrides(sc, {"workload.concurrency": c}), duration_s, seed)
            wall = time.perf_counter() - t0
            rec = observe(res, interval_s=1.0, seed=seed)
            power = np.concatenate([s.values[Metric.POWER_AVG_W] for s in rec.series.values()])
            rows.append(
                Row(
                    case,
                    name,
                    c,
                    res.tokens_per_s,
                    SEED_TOKENS_PER_S[(case, c)],
                    float(np.mean(power)),
                    wall,
                )
            )
    return rows


# The candidate fixes of the seed case (docs/simulator.md): label, scenario, overrides.
FIXES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("seed: depth 0, graphs off, default per-slot cap", "pp8-serialized", {}),
    ("--pp-async-batch-depth 8", "pp8-serialized", {"parallel.pp_async_batch_depth": 8}),
    ("--pp-max-micro-batch-size 1", "pp8-serialized", {"parallel.pp_max_micro_batch_size": 1}),
    (
        "depth 8 + cap 1",
        "pp8-serialized",
        {"parallel.pp_async_batch_depth": 8, "parallel.pp_max_micro_batch_size": 1},
    ),
    ("CUDA graphs on", "pp8-serialized", {"parallel.cuda_graph": True}),
    (
        "cap 1 + graphs on",
        "pp8-serialized",
        {"parallel.pp_max_micro_batch_size": 1, "parallel.cuda_graph": True},
    ),
    (
        "cap 1 + graphs on + depth 8",
        "pp8-serialized",
        {
            "parallel.pp_max_micro_batch_size": 1,
            "parallel.cuda_graph": True,
            "parallel.pp_async_batch_depth": 8,
        },
    ),
    ("TP8 (graphs on)", "tp8", {}),
    ("EP8 (--tp 8 --ep-size 8, graphs on)", "tp8", {"parallel.ep_size": 8}),
)


@dataclass(frozen=True)
class Prediction:
    fix: str
    concurrency: int
    tokens_per_s: float
    gain: float  # over the seed at the same concurrency
    mean_in_flight: float
    busy_sum: float
    mean_power_w: float


def predict(duration_s: float, seed: int) -> list[Prediction]:
    """Each candidate fix on the seed case at C=1 and C=8 (arrivals together)."""
    out: list[Prediction] = []
    base: dict[int, float] = {}
    for label, name, overrides in FIXES:
        for c in (1, 8):
            sc = apply_overrides(load_scenario(name), {**overrides, "workload.concurrency": c})
            res = simulate(sc, duration_s, seed)
            rep = res.truth.replicas[0]
            tps = res.tokens_per_s
            base.setdefault(c, tps)
            power = float(np.mean([s.power_w for s in res.truth.stages]))
            out.append(
                Prediction(label, c, tps, tps / base[c], rep.mean_in_flight, rep.busy_sum, power)
            )
    return out


def rule_gains(preds: list[Prediction]) -> dict[str, float]:
    """The C=8 gains the shipped rules quote (their `sim_gain_*` params)."""
    tps = {p.fix: p.tokens_per_s for p in preds if p.concurrency == 8}
    seed = tps[FIXES[0][0]]
    return {
        "sim_gain_cap_graphs_off": tps["--pp-max-micro-batch-size 1"] / seed,
        "sim_gain_cap_graphs_on": tps["cap 1 + graphs on"] / tps["CUDA graphs on"],
        "sim_gain_graphs": tps["CUDA graphs on"] / seed,
        "sim_gain_depth": tps["cap 1 + graphs on + depth 8"] / tps["cap 1 + graphs on"],
        "sim_gain_depth_alone": tps["--pp-async-batch-depth 8"] / seed,
    }


def predictions_markdown(preds: list[Prediction]) -> str:
    by = {(p.fix, p.concurrency): p for p in preds}
    lines = [
        "| fix | C=1 tok/s | C=8 tok/s | C=8 gain | C=8 in flight | C=8 busy sum | C=8 W/GPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, _, _ in FIXES:
        one, eight = by[(label, 1)], by[(label, 8)]
        lines.append(
            f"| {label} | {one.tokens_per_s:.1f} | {eight.tokens_per_s:.1f} | "
            f"x{eight.gain:.2f} | {eight.mean_in_flight:.2f} | {eight.busy_sum:.2f} | "
            f"{eight.mean_power_w:.0f} |"
        )
    return "\n".join(lines)


def checks(rows: list[Row]) -> dict[str, Any]:
    by = {(r.case, r.concurrency): r for r in rows}
    out: dict[str, Any] = {}
    ok = True
    for c in (1, 8):
        sim = by[("pp8", c)].sim_tokens_per_s / by[("tp8", c)].sim_tokens_per_s
        seed = by[("pp8", c)].seed_tokens_per_s / by[("tp8", c)].seed_tokens_per_s
        within = seed / 2 <= sim <= seed * 2
        out[f"ratio_c{c}"] = {"sim": round(sim, 3), "seed": round(seed, 3), "within_2x": within}
        ok &= within
    direction = out["ratio_c8"]["sim"] < out["ratio_c1"]["sim"]
    out["direction_ok"] = direction
    p = by[("pp8", 8)].mean_power_w
    band = SEED_POWER_BAND_W[0] <= p <= SEED_POWER_BAND_W[1]
    out["pp8_c8_power_w"] = {"sim": round(p, 1), "band": list(SEED_POWER_BAND_W), "in_band": band}
    out["ok"] = bool(ok and direction and band)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0, help="simulated seconds per case")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--predict", action="store_true", help="the candidate fixes side by side")
    ap.add_argument("--markdown", action="store_true", help="with --predict: a Markdown table")
    args = ap.parse_args(argv)
    if args.predict:
        preds = predict(args.duration, args.seed)
        if args.json:
            print(json.dumps([p.__dict__ for p in preds], indent=2))
        elif args.markdown:
            print(predictions_markdown(preds))
        else:
            print(f"{'fix':<48}{'C':>3}{'tok/s':>9}{'gain':>7}{'in flight':>11}{'busy':>7}{'W':>6}")
            for p in preds:
                print(
                    f"{p.fix:<48}{p.concurrency:>3}{p.tokens_per_s:>9.1f}{p.gain:>7.2f}"
                    f"{p.mean_in_flight:>11.2f}{p.busy_sum:>7.2f}{p.mean_power_w:>6.0f}"
                )
        return 0
    rows = run(args.duration, args.seed)
    result = checks(rows)
    if args.json:
        print(json.dumps({"rows": [r.__dict__ for r in rows], "checks": result}, indent=2))
        return 0 if result["ok"] else 1
    print(
        f"{'case':<6}{'C':>3}{'seed tok/s':>12}{'sim tok/s':>11}{'sim/seed':>10}"
        f"{'power W':>9}{'wall s':>8}"
    )
    for r in rows:
        print(
            f"{r.case:<6}{r.concurrency:>3}{r.seed_tokens_per_s:>12.1f}{r.sim_tokens_per_s:>11.1f}"
            f"{r.sim_tokens_per_s / r.seed_tokens_per_s:>10.2f}"
            f"{r.mean_power_w:>9.1f}{r.wall_s:>8.2f}"
        )
    for c in (1, 8):
        d = result[f"ratio_c{c}"]
        print(
            f"PP8/TP8 at C={c}: sim {d['sim']:.3f}  seed {d['seed']:.3f}  "
            f"within 2x: {d['within_2x']}"
        )
    print(f"direction (ratio falls from C=1 to C=8): {result['direction_ok']}")
    pw = result["pp8_c8_power_w"]
    print(f"PP8 C=8 mean power per GPU: {pw['sim']} W (seed band 150-200 W): {pw['in_band']}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
