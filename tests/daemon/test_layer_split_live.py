"""The daemon on a fake-NVML host where one llama-server process holds three GPUs in turn.

The GPUs' physical state is the simulator's layer split (scenario layersplit4 on 3
GPUs, the host reading the next prompt between requests), its stages placed on
GPUs 2, 0, 1: each token's forward visits GPU 2, then 0, then 1. The fake NVML
lists one pid on all three, holding memory in proportion to llama.cpp's
`-ts 1,3,2` in that order, and that pid is a real stand-in process whose command
line is llama-server's. The daemon discovers no engine, names the single-process
job and where its layers are, judges the turns a layer split in that order, and
the shipped LlamaCppLayerSplitSerialized rule alerts a webhook with llama.cpp's
own advice and the rendered tensor-parallel command. So that the test takes one analysis window, not
the rule's `for: 2m` (its hold is tested in test_no_engine.py), a site rule file
adds the shipped rule, copied as it is but for its name and a `for` of 0 s.
The shipped rules fire too, held by their `for`.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from fake_nvml.fixtures import fake_env, fake_nvml_lib

from bubblewatch.rules.loader import rule_files
from bubblewatch.sim import load_scenario, simulate
from bubblewatch.sim.scenario import apply_overrides

from ._inbox import Inbox, inbox
from ._proc import metric, running, wait_for, write_config

__all__ = ["fake_nvml_lib", "inbox"]

NOW = "LlamaCppLayerSplitSerializedNow"
LLAMA_ARGV = ["llama-server", "-m", "/models/llama-70b-q4.gguf", "-ngl", "99", "-ts", "1,3,2"]
PLACED = (2, 0, 1)  # GPU of layer block 0, 1, 2: the memory -ts 1,3,2 puts on each
MEMORY_MIB = {0: 31000, 1: 21000, 2: 11000}


def _shipped_rule_without_hold(path: Path) -> Path:
    """A site rule file: the shipped LlamaCppLayerSplitSerialized, renamed NOW, `for` 0 s."""
    for f in rule_files(None):
        for group in yaml.safe_load(f.read_text())["groups"]:
            for rule in group["rules"]:
                if rule["name"] == "LlamaCppLayerSplitSerialized":
                    rule.update(name=NOW, **{"for": "0s"})
                    doc = {"version": 1, "groups": [{"name": "site", "rules": [rule]}]}
                    path.write_text(yaml.safe_dump(doc, sort_keys=False))
                    return path
    raise AssertionError("no LlamaCppLayerSplitSerialized among the shipped rules")


def _timeline(path: Path) -> Path:
    """Three GPUs of one process taking turns, stage s on GPU PLACED[s]."""
    sc = apply_overrides(
        load_scenario("layersplit4"),
        {"job.pp_size": 3, "job.stage_forward_s": [0.09], "job.loading_s": 0.0},
    )
    tl = simulate(sc, duration_s=120.0, seed=5).timeline
    rows = [PLACED.index(g) for g in range(3)]  # GPU g shows the stage placed on it
    replace(tl, data=tl.data[rows], gpus=tuple(tl.gpus[r] for r in rows)).write(path)
    return path


def _stand_in(argv: list[str]) -> subprocess.Popen[bytes]:
    """A process whose /proc/PID/cmdline is `argv` (a Python that sleeps, named llama-server)."""
    code = "import time; time.sleep(600)"
    return subprocess.Popen([argv[0], "-c", code, *argv[1:]], executable=sys.executable)


def _other_engines() -> list[str]:
    """Serving engines the daemon's /proc scan would find on this host (another test's)."""
    from bubblewatch.daemon.pipelines.discovery import discover_pipelines

    return [p.id for p in discover_pipelines({}, [], instance="h").pipelines if p.engine]


@pytest.mark.slow
def test_llama_server_on_three_gpus_taking_turns_alerts_with_the_tp_command(
    tmp_path: Path, fake_nvml_lib, inbox: Inbox
) -> None:
    if others := _other_engines():
        pytest.skip(
            f"a serving engine runs on this host, the daemon would follow it: {others} "
            "(run alone: unshare --pid --fork --mount-proc pytest ...)"
        )
    tl = _timeline(tmp_path / "t.bwtl")
    engine = _stand_in(LLAMA_ARGV)
    try:
        procs = ",".join(f"{g}:{engine.pid}:{mib}" for g, mib in MEMORY_MIB.items())
        env = fake_env(fake_nvml_lib, tl, procs=procs)
        cfg = write_config(
            tmp_path / "bubblewatch.yml",
            simulate=None,
            sampling={"interval": "100ms", "history": "60s"},
            analysis={"interval": "2s", "window": "40s"},
            rules={"files": [str(_shipped_rule_without_hold(tmp_path / "site.rules.yaml"))]},
            alerting={
                "repeat_interval": "1h",
                "receivers": [{"name": "hook", "type": "webhook", "url": inbox.url}],
            },
        )
        with running(cfg, env=env) as d:
            (alert, *_) = wait_for(
                lambda: d._check_alive() or inbox.got(NOW, "firing"),
                timeout_s=120,
                what="the llama.cpp layer-split alert at the webhook",
            )
            m = d.metrics()
            log = d.log
    finally:
        engine.kill()
        engine.wait(10)
    jobs = [line for line in log.splitlines() if "one process holds several GPUs" in line]
    assert jobs and f"pid {engine.pid} (llama.cpp, split layer) on GPUs 0,1,2" in jobs[0], log
    assert 'layer_order=2,0,1 order_from="--tensor-split and memory per GPU"' in jobs[0]
    assert alert["status"] == "firing" and alert["labels"]["signature"] == "serialized"
    assert "llama.cpp splits the model layer-wise over 3 GPUs" in alert["summary"]
    assert "--split-mode row" in alert["fix"], alert
    assert "vllm serve MODEL --tensor-parallel-size 3" in alert["fix"], alert
    assert metric(m, "bubblewatch_pipeline_verdict", verdict="serialized") == 1.0, m
