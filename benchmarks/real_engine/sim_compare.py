"""The simulator's vLLM scheduler beside the real engine's: batch sizes and batches in flight.

    .venv/bin/python benchmarks/real_engine/sim_compare.py [out/real-engine/report.json]

The simulated engine is the shipped `pp2-async` scenario (2 GPUs, dense model)
run as vLLM 0.32.0 with the real run's command line shape (PP 2, no async
flag), its prompts and outputs as the real client's (13 tokens, and 32-96
uniform, jitter 0.5: the simulator jitters the prompt too), at each
concurrency of the report, with the first requests arriving together and
spread over 50 ms. Timings differ by design (a GPU
model against a CPU one); what is compared is the scheduler's structure:
requests per forward pass and the mean batches in flight, from the
simulator's truth and from the real run's hook (standin.truth).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bubblewatch.sim import apply_overrides, load_scenario, simulate

# "Spread": the first requests arrive over 50 ms (within the first step), as the real
# client's threads start one after another; "together": all at t = 0.
SPREAD_S = 0.05
ARGV = [
    "python",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "m",
    "--pipeline-parallel-size",
    "2",
]


def simulated(c: int, ramp_s: float, duration_s: float = 30.0) -> dict[str, Any]:
    sc = apply_overrides(
        load_scenario("pp2-async"),
        {
            "engine": "vllm",
            "engine_argv": ARGV,
            "engine_version": "0.32.0",
            "parallel.pp_async_batch_depth": 0,
            "parallel.pp_max_micro_batch_size": None,
            "workload.concurrency": c,
            "workload.input_tokens": 13,
            "workload.output_tokens": 64,
            # the client's outputs are 32-96 tokens (uniform); the simulator jitters the
            # prompt's 13 tokens by the same ratio too
            "workload.length_jitter_ratio": 0.5,
            "workload.ramp_s": ramp_s,
        },
    )
    res = simulate(sc, duration_s=duration_s, seed=0)
    rep = res.truth.replicas[0]
    return {
        "reqs_per_step": rep.decode_tokens_per_micro_batch,
        "mean_in_flight": rep.mean_in_flight,
        "max_in_flight": rep.max_in_flight,
        "busy_sum": rep.busy_sum,
    }


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "out/real-engine/report.json")
    report = json.loads(path.read_text())
    print(
        "| C | requests per forward pass: real | simulated, together | spread | "
        "batches in flight: real | simulated, together | spread |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in report.get("base", []):
        c = row["concurrency"]
        t = row["truth"]
        tog, spread = simulated(c, 0.0), simulated(c, SPREAD_S)
        real_fly = t.get("mean_in_flight")
        print(
            f"| {c} | {t['mean_batch_reqs']:.1f} | {tog['reqs_per_step']:.1f} | "
            f"{spread['reqs_per_step']:.1f} | "
            f"{'-' if real_fly is None else format(real_fly, '.2f')} | "
            f"{tog['mean_in_flight']:.2f} | {spread['mean_in_flight']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
