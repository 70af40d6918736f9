"""Measure what NVML really reports on a GPU host, under busy, idle and spin-like load.

Runs `bubblewatch record` and the capability probe while a PyTorch workload
runs on GPU 0, and measures directly through pynvml: driver sample-buffer
rates, GPM values, instant vs 1 s average power, and per-call latencies.
Writes a markdown report (for docs/hardware-notes.md) to the path given.

    python scripts/hardware_probe.py REPORT.md [--phase-s 10]

Needs an NVIDIA GPU, its driver, torch and bubblewatch installed. Not run yet.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PHASES = ("idle", "busy", "spin")


def workload(phase: str, seconds: float, ready: Any) -> None:
    """GPU 0: nothing, a large matmul loop, or a tiny kernel in a tight loop (spin-like)."""
    import torch

    dev = torch.device("cuda:0")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    ready.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if phase == "busy":
            for _ in range(8):
                a = (a @ a).clamp_(-1, 1)
        elif phase == "spin":
            for _ in range(1000):
                x.add_(
                    1
                )  # one tiny kernel, over and over: SMs nearly idle, a kernel always running
        else:
            time.sleep(0.05)
            continue
        torch.cuda.synchronize()


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1e6


def measure(phase: str, seconds: float) -> dict[str, Any]:
    import pynvml

    from bubblewatch.sources.nvml import Nvml
    from bubblewatch.sources.nvml.api import GPU_UTILIZATION_SAMPLES, TOTAL_POWER_SAMPLES
    from bubblewatch.sources.nvml.errors import NvmlError

    nv = Nvml()
    h = nv.handle(0)
    lat: dict[str, list[float]] = {}
    rows: list[dict[str, float]] = []
    buf_ts: dict[int, list[int]] = {TOTAL_POWER_SAMPLES: [], GPU_UTILIZATION_SAMPLES: []}
    last = {k: int(time.time() * 1e6) for k in buf_ts}
    gpm = [nv.gpm_alloc(), nv.gpm_alloc()] if nv.gpm_supported(h) else None
    if gpm:
        nv.gpm_sample(h, gpm[0])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.2)
        row: dict[str, float] = {}
        for name, fn in (
            ("instant_w", nv.power_instant_w),
            ("avg_w", nv.power_avg_w),
            ("util", nv.kernel_busy_ratio),
            ("sm_clock", nv.sm_clock_mhz),
        ):
            try:
                row[name], us = timed(fn, h)
                lat.setdefault(name, []).append(us)
            except NvmlError:
                pass
        for kind, seen in buf_ts.items():
            try:
                got, us = timed(nv.samples, h, kind, last[kind])
                lat.setdefault(f"samples[{kind}]", []).append(us)
                seen.extend(t for t, _ in got)
                last[kind] = max(t for t, _ in got)
            except NvmlError:
                pass
        if gpm:
            _, us = timed(nv.gpm_sample, h, gpm[1])
            lat.setdefault("gpm_sample", []).append(us)
            got, us = timed(nv.gpm_metrics, gpm[0], gpm[1], (2, 3, 5))
            lat.setdefault("gpm_metrics", []).append(us)
            for k, v in got.items():
                if isinstance(v, float):
                    row[f"gpm_{k}"] = v
            gpm.reverse()
        rows.append(row)
    _, us = timed(pynvml.nvmlDeviceGetPcieThroughput, h, 0)
    lat["pcie_throughput"] = [us]

    def rate(ts: list[int]) -> float:
        return (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e6) if len(ts) > 2 else float("nan")

    def mean(key: str) -> float:
        vals = [r[key] for r in rows if key in r]
        return statistics.fmean(vals) if vals else float("nan")

    return {
        "phase": phase,
        "power_samples_hz": rate(buf_ts[TOTAL_POWER_SAMPLES]),
        "util_samples_hz": rate(buf_ts[GPU_UTILIZATION_SAMPLES]),
        "instant_w": mean("instant_w"),
        "avg_w": mean("avg_w"),
        "util": mean("util"),
        "gpm_sm_util_pct": mean("gpm_2"),
        "gpm_occupancy_pct": mean("gpm_3"),
        "gpm_tensor_pct": mean("gpm_5"),
        "latency_us": {k: statistics.median(v) for k, v in lat.items()},
        "errors": nv.errors.to_dict(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--phase-s", type=float, default=10.0)
    args = ap.parse_args()
    import pynvml

    from bubblewatch.sources.nvml import NvmlSource

    pynvml.nvmlInit()
    out = ["# NVML on real hardware", ""]
    with NvmlSource.open() as src:
        out.append(f"driver {src.driver_version}; GPUs: " + ", ".join(g.name for g in src.gpus()))
        for gpu, caps in src.capabilities().items():
            out.append(f"- GPU {gpu} capabilities: {caps.to_dict()}")
    out += [
        "",
        "| phase | power buf Hz | util buf Hz | instant W | avg W | util | GPM SM % "
        "| GPM occ % | GPM tensor % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    results = []
    ctx = mp.get_context("spawn")
    for phase in PHASES:
        ready = ctx.Event()
        p = ctx.Process(target=workload, args=(phase, args.phase_s + 5, ready))
        p.start()
        ready.wait(120)
        time.sleep(2)  # let the 1 s average settle
        r = measure(phase, args.phase_s)
        p.join()
        results.append(r)
        out.append(
            f"| {phase} | {r['power_samples_hz']:.1f} | {r['util_samples_hz']:.1f} "
            f"| {r['instant_w']:.0f} | {r['avg_w']:.0f} | {r['util']:.2f} "
            f"| {r['gpm_sm_util_pct']:.1f} | {r['gpm_occupancy_pct']:.1f} "
            f"| {r['gpm_tensor_pct']:.1f} |"
        )
    out += ["", "Median call latency (µs):", ""]
    for r in results:
        out.append(
            f"- {r['phase']}: " + ", ".join(f"{k} {v:.0f}" for k, v in r["latency_us"].items())
        )
        if r["errors"]:
            out.append(f"  - NVML errors: {r['errors']}")
    trace = args.report.with_suffix(".jsonl.gz")
    rec = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubblewatch",
            "record",
            "-o",
            str(trace),
            "--duration",
            "5",
            "--interval",
            "0.25",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    out += [
        "",
        f"`bubblewatch record` (5 s, 0.25 s): rc {rec.returncode}",
        "",
        "```",
        rec.stdout.strip() or rec.stderr.strip(),
        "```",
        "",
    ]
    pynvml.nvmlShutdown()
    args.report.write_text("\n".join(out) + "\n")
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
