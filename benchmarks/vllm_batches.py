"""vLLM's batch queue per release in the simulator: 0.33 as it ships against --no-async-scheduling.

    .venv/bin/python benchmarks/vllm_batches.py [--duration 60] [--concurrency 1,8,64,256]

pp8-serialized run as vLLM 0.33.0 (async scheduling + V2 runner: pp_size + 1 = 9
batches in flight) and with `--no-async-scheduling` (8), requests arriving over
5 s, seed 0; tokens/s of each and their ratio, as a markdown table.
"""

from __future__ import annotations

import argparse

from bubblewatch.sim import load_scenario, simulate
from bubblewatch.sim.scenario import apply_overrides


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--concurrency", default="1,8,64,256")
    args = ap.parse_args(argv)
    base = load_scenario("pp8-serialized")
    print("| C | graphs | 0.33 (9 batches) tokens/s | --no-async-scheduling (8) | ratio |")
    print("|---|---|---|---|---|")
    for c in (int(x) for x in args.concurrency.split(",")):
        for graphs in (True, False):
            tps = []
            for extra in ([], ["--no-async-scheduling"]):
                eager = [] if graphs else ["--enforce-eager"]
                sc = apply_overrides(
                    base,
                    {
                        "engine": "vllm",
                        "engine_argv": ["vllm", "serve", "m", "-pp", "8", *extra, *eager],
                        "engine_version": "0.33.0",
                        "parallel.pp_async_batch_depth": 0,
                        "parallel.cuda_graph": graphs,
                        "workload.concurrency": c,
                        "workload.ramp_s": 5.0,
                    },
                )
                tps.append(simulate(sc, duration_s=args.duration, seed=0).tokens_per_s)
            on = "on" if graphs else "off"
            print(f"| {c} | {on} | {tps[0]:.1f} | {tps[1]:.1f} | {tps[0] / tps[1]:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
