"""`bubblewatch simulate` and `bubblewatch scenarios` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.model.metrics import Metric
from bubblewatch.sim import Timeline
from bubblewatch.sources.trace import read_trace


def test_simulate_writes_a_readable_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    tl = tmp_path / "t.bwtl"
    rc = main(
        ["simulate", "pp8-serialized", "--duration", "60", "-o", str(out), "--timeline", str(tl)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "pp8-serialized" in printed and "tok/s" in printed
    rec = read_trace(out)
    assert rec.topology is not None and rec.topology.pp_size == 8
    assert "--disable-cuda-graph" in rec.topology.argv
    assert rec.meta["engine_argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert 80 < rec.meta["tokens_per_s"] < 110  # from the summary record
    assert len(rec.meta["truth"]["stages"]) == 8
    assert len(rec.gpus) == 8 and rec.duration_s > 55
    power = np.concatenate([s.values[Metric.POWER_AVG_W] for s in rec.series.values()])
    assert 150 <= float(power.mean()) <= 200
    assert len(rec.load) == 60
    assert Timeline.read(tl).n_gpus == 8


def test_simulate_set_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.jsonl.gz"
    rc = main(
        [
            "simulate",
            "pp8-serialized",
            "--duration",
            "5",
            "--set",
            "workload.concurrency=1",
            "--set",
            "parallel.pp_async_batch_depth=8",
            "-o",
            str(out),
            "--json",
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scenario"] == "pp8-serialized" and summary["tokens_per_s"] > 0
    rec = read_trace(out)
    assert "--pp-async-batch-depth" in rec.topology.argv  # type: ignore[union-attr]


def test_simulate_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "x.jsonl")
    assert main(["simulate", "pp8-serialized", "--set", "parallel.pp_size=zero", "-o", out]) == 2
    err = capsys.readouterr().err
    assert "parallel.pp_size" in err and "integer" in err
    assert main(["simulate", "pp8-serialized", "--set", "novalue", "-o", out]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["simulate", "no-such-scenario", "-o", out]) == 2


def test_scenarios_lists_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    names = {i["name"] for i in items}
    assert {"pp8-serialized", "tp8", "dp8", "idle"} <= names
    assert main(["scenarios"]) == 0
    assert "pp8-serialized" in capsys.readouterr().out


@pytest.mark.slow
def test_simulate_a_layer_split_as_bare_nvidia_smi(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's captures: power.draw and utilization.gpu only, no topology, loading first."""
    out = tmp_path / "split.csv"
    argv = ["simulate", "layersplit4", "--duration", "200", "--interval", "0.1"]
    assert main([*argv, "--format", "nvidia-smi-bare", "-o", str(out)]) == 0
    header = out.read_text().splitlines()[0]
    assert header == "timestamp, index, power.draw [W], utilization.gpu [%]"
    capsys.readouterr()
    assert main(["analyze", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "serialized"
    assert d["evidence"]["pipeline_evidence"] == "turn_taking"
    assert d["evidence"]["inferred_stages"] == [[0], [1], [2], [3]]
