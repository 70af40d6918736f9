"""`record` on a training host: the real pynvml against the fake NVML library, a fake /proc
tree of DeepSpeedExamples' pipeline job (tests/fixtures/proc_training), the layout in the
trace header and through `analyze` to the training rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fake_nvml.fixtures import fake_env
from fake_nvml.timeline import ramp

from bubblewatch.sources.trace import TraceReader

TREE = Path(__file__).resolve().parents[1] / "fixtures" / "proc_training" / "deepspeed_pipe2"


def test_record_header_carries_the_training_layout(fake_nvml_lib, tmp_path):
    out = tmp_path / "rec.jsonl"
    tl = ramp(8).write(tmp_path / "t.bwtl")
    procs = ",".join(f"{g}:{9110 + g}" for g in range(8))
    env = fake_env(fake_nvml_lib, tl, procs=procs)
    argv = ["record", "-o", str(out), "--duration", "1", "--interval", "0.25",
            "--proc-root", str(TREE), "--json"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "bubblewatch", *argv],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recording = TraceReader(out).read()
    assert recording.topology is not None
    assert recording.topology.stages == ((0,), (4,))  # replica 0: ranks 0 and 4
    training = recording.meta["training"]
    assert (training["framework"], training["pp_size"], training["dp_size"]) == ("deepspeed", 2, 4)
    assert training["micro_batches"] == 8 and training["expected_bubble"]["bubble_ratio"] == 0.1111
    assert training["gpu_ranks"] == {str(g): g for g in range(8)}
    analyzed = subprocess.run(
        [sys.executable, "-m", "bubblewatch", "analyze", str(out), "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert analyzed.returncode == 0, analyzed.stderr
    doc = json.loads(analyzed.stdout)
    assert doc["engine"]["name"] == "deepspeed"
    assert doc["engine"]["training"]["config_file"] == "ds_config.json"
