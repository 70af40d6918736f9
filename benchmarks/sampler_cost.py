"""CPU cost of the NVML sampler per GPU-sample, against the fake libnvidia-ml.so.1 (8 GPUs).

Runs in-process through the real pynvml with the fake's manual clock, so no
time is spent sleeping; the CPU time measured includes the fake's own work
(small: prefix-sum lookups), so it slightly overstates the sampler's cost.

    .venv/bin/python benchmarks/sampler_cost.py [--ticks N] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _report import emit  # noqa: E402
from fake_nvml.build import build  # noqa: E402
from fake_nvml.timeline import serialized_pipeline  # noqa: E402

N_GPUS = 8
T0 = 1_700_000_000.0
CASES = {
    "all metrics + sample buffers": ({}, True),
    "all metrics, no sample buffers": ({}, False),
    "older card (no GPM, no field 186)": (
        {"BUBBLEWATCH_FAKE_NVML_NO_GPM": "all", "BUBBLEWATCH_FAKE_NVML_NO_INSTANT_POWER": "all"},
        True,
    ),
}


def measure(
    lib: ctypes.CDLL,
    timeline: Path,
    *,
    env: dict[str, str],
    buffers: bool,
    ticks: int,
    interval_s: float,
) -> tuple[float, float, float]:
    from bubblewatch.sources.nvml import NvmlSource, SamplerConfig

    for k in [k for k in os.environ if k.startswith("BUBBLEWATCH_FAKE_NVML_")]:
        del os.environ[k]
    os.environ["BUBBLEWATCH_FAKE_NVML_TIMELINE"] = str(timeline)
    os.environ.update(env)
    lib.bwfake_reset()
    lib.bwfake_set_time(ctypes.c_double(T0))
    clock = {"t": 0.0}
    src = NvmlSource.open(
        SamplerConfig(interval_s=interval_s, sample_buffers=buffers),
        wall_clock=lambda: T0 + clock["t"],
    )
    lib.bwfake_calls.restype = ctypes.c_ulonglong
    calls0 = lib.bwfake_calls()
    gpu_samples = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(1, ticks + 1):
        clock["t"] = i * interval_s
        lib.bwfake_set_time(ctypes.c_double(T0 + clock["t"]))
        rows = src.poll(clock["t"])
        gpu_samples += sum(1 for r in rows if len(r.values) > 2)  # polled rows, not buffer rows
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    calls = lib.bwfake_calls() - calls0
    src.close()
    return cpu / gpu_samples * 1e6, wall / gpu_samples * 1e6, calls / gpu_samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=400)
    ap.add_argument("--interval", type=float, default=0.25, help="simulated seconds per tick")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lib_path = build(Path(tmp) / "lib")
        lib = ctypes.CDLL(str(lib_path), mode=ctypes.RTLD_GLOBAL)
        timeline = serialized_pipeline(N_GPUS, seconds=8.0).write(Path(tmp) / "t.bwtl")
        lines = [
            f"NVML sampler cost against the fake libnvidia-ml.so.1: {N_GPUS} GPUs, "
            f"{args.ticks} ticks of {args.interval:g} s (manual clock, no sleeping)",
            f"host: {platform.machine()}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs; CPU time includes the fake's own work",
            "",
            f"{'case':<36} {'CPU us/GPU-sample':>18} {'wall us/GPU-sample':>19} "
            f"{'NVML calls/GPU-sample':>22}",
        ]
        for name, (env, buffers) in CASES.items():
            measure(lib, timeline, env=env, buffers=buffers, ticks=20, interval_s=args.interval)
            cpu_us, wall_us, calls = measure(
                lib, timeline, env=env, buffers=buffers, ticks=args.ticks, interval_s=args.interval
            )
            lines.append(f"{name:<36} {cpu_us:>18.1f} {wall_us:>19.1f} {calls:>22.1f}")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
