"""Calibrate the simulator against the seed: PP8 serialized (graphs off) vs TP8, at C=1 and C=8.

    .venv/bin/python benchmarks/calibrate.py [--duration 60] [--seed 0] [--json]

Prints simulated tokens/s next to the seed's measurements, the PP8/TP8 ratios,
and PP8's mean 1 s average power per GPU (the seed saw 150-200 W of 600 W).
Exits 1 when a calibration bound from the issue is not met.
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
from bubblewatch.sources.sim import load_scenario, observe, simulate

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
            res = simulate(sc.with_overrides({"workload.concurrency": c}), duration_s, seed)
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
    args = ap.parse_args(argv)
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
