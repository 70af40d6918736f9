"""Memory in use from NVML to the trace and the detector: the real pynvml against the fake
library, GPUs 0-1 holding a model (their processes' memory) and GPUs 2-3 empty, all idle."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from fake_nvml.fixtures import fake_env
from fake_nvml.timeline import FIELDS, F, Timeline

from bubblewatch.daemon.record.recorder import TraceRecorder
from bubblewatch.detect import Verdict, diagnose
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.nvml import NvmlSource, SamplerConfig
from bubblewatch.sources.trace import read_trace

MODEL_MIB = 30000
PROCS = f"0:100:{MODEL_MIB},1:101:{MODEL_MIB}"


def _idle(n_gpus: int = 4, seconds: float = 4.0, dt_s: float = 0.05) -> Timeline:
    """No kernel runs: idle power, idle clocks, no SM activity."""
    data = np.zeros((n_gpus, len(FIELDS), round(seconds / dt_s)), dtype=np.float32)
    data[:, F["power_w"]] = 80.0
    data[:, F["sm_clock_mhz"]] = 345.0
    data[:, F["clocks_event_reasons"]] = 1.0  # GpuIdle
    data[:, F["temperature_c"]] = 30.0
    return Timeline(data, dt_s=dt_s)


def test_record_writes_memory_used_per_gpu(fake_nvml_lib, tmp_path):
    out = tmp_path / "rec.jsonl"
    env = fake_env(fake_nvml_lib, _idle().write(tmp_path / "t.bwtl"), procs=PROCS)
    argv = ["record", "-o", str(out), "--duration", "1", "--interval", "0.25", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "bubblewatch", *argv],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rec = read_trace(out)
    for gpu, mib in ((0, MODEL_MIB), (1, MODEL_MIB), (2, 0), (3, 0)):
        s = rec.series[gpu]
        assert s.has(Metric.MEMORY_USED_BYTES)
        used = s.values[Metric.MEMORY_USED_BYTES]
        assert set(used[np.isfinite(used)].tolist()) == {float(mib << 20)}


def test_idle_finding_tells_loaded_from_empty_gpus_on_sampled_memory(fake_nvml, tmp_path):
    fake = fake_nvml(_idle(), procs=PROCS)
    path = tmp_path / "rec.jsonl"
    with NvmlSource.open(SamplerConfig(sample_buffers=False), wall_clock=fake.wall) as src:
        rec = TraceRecorder(path, src.gpus(), None, {"source": "test"}, wall_clock=fake.wall)
        for t in 0.0012 + np.arange(30) * 0.5:  # 15 s at 2 Hz on the fake's manual clock
            rec.add(src.poll(fake.at(float(t))))
        rec.close()
    d = diagnose(read_trace(path))
    assert d.verdict is Verdict.IDLE
    ev = d.findings[0].evidence
    assert (ev["loaded_gpus"], ev["empty_gpus"]) == ([0, 1], [2, 3])
    assert ev["memory_used_gib"] == round(MODEL_MIB / 1024, 1)
    assert "GPU(s) 0,1 hold a model" in d.findings[0].summary
