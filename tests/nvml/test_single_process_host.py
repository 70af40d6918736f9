"""A fake-NVML host where one process holds three GPUs: the daemon's discovery names the job."""

from __future__ import annotations

from fake_nvml.timeline import ramp

from bubblewatch.daemon.pipelines.discovery import discover_pipelines
from bubblewatch.daemon.sources.nvmlsource import NvmlDaemonSource
from bubblewatch.sources.nvml.sampler import NvmlSource

PID = 2**22 + 777  # beyond any pid_max: /proc has no such process, so its runtime is unknown


def test_one_pid_on_three_of_four_gpus_is_one_single_process_job(fake_nvml):
    fake_nvml(ramp(4), procs=f"0:{PID}:20000,1:{PID}:20000,2:{PID}:18000,3:99")
    src = NvmlDaemonSource(NvmlSource.open())
    try:
        memory = src.processes()
        procs = {gpu: list(pids) for gpu, pids in memory.items()}
        assert procs == {0: [PID], 1: [PID], 2: [PID], 3: [99]}
        mib = 1 << 20
        assert memory == {
            0: {PID: 20000 * mib},
            1: {PID: 20000 * mib},
            2: {PID: 18000 * mib},
            3: {99: 1024 * mib},  # the fake's default where a pid is given no memory
        }
        lookup = discover_pipelines(procs, src.gpus(), instance="h")
    finally:
        src.close()
    (pipe,) = lookup.pipelines
    assert pipe.engine is None and pipe.topology is None
    assert pipe.single_process == f"pid {PID} (unknown, split unknown) on GPUs 0,1,2"
