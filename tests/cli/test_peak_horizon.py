"""`analyze --peak-horizon` sizes the fill knobs for the load of the horizon it names (issue 18)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.scenario import apply_overrides, builtin_dir
from bubblewatch.sources.trace import write_trace

CMD = (
    "python -m sglang.launch_server --model-path m --pp-size 8 --disable-cuda-graph "
    "--port 30000 --pp-max-micro-batch-size 4"
)


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """256 requests for 40 s, then 8: the queue behind a cap of 4 drains over the run."""
    d = tmp_path_factory.mktemp("burst")
    text = (builtin_dir() / "pp8-serialized.yaml").read_text()
    text = text.replace(
        "workload:\n",
        "workload:\n  schedule: [{start_s: 0.0, concurrency: 256},"
        " {start_s: 40.0, concurrency: 8}]\n",
        1,
    )
    (d / "burst.yaml").write_text(text)
    sc = apply_overrides(load_scenario(d / "burst.yaml"), {"parallel.pp_max_micro_batch_size": 4})
    out = d / "burst.jsonl"
    write_trace(out, observe(simulate(sc, duration_s=160.0, seed=0), interval_s=1.0))
    return out


def _peak(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> float:
    argv = ["analyze", str(path), "--engine-cmdline", CMD, "--engine-version", "0.5.11"]
    assert main([*argv, "--json", *extra]) == 0
    recs = json.loads(capsys.readouterr().out)["recommendations"]
    (cap,) = [r for r in recs if r["rule"] == "MicroBatchCapLimitsLoad"]
    m = re.search(r"the peak of (\d+) running", cap["description"])
    assert m is not None, cap["description"]
    return float(m.group(1))


def test_a_shorter_horizon_forgets_the_early_burst(
    burst: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    day = _peak(burst, capsys)
    assert _peak(burst, capsys, "--peak-horizon", "1d") == day
    recent = _peak(burst, capsys, "--peak-horizon", "10s")
    assert recent < day


@pytest.mark.parametrize(("value", "message"), [("soon", "duration"), ("31d", "at most 30d")])
def test_bad_horizon_is_a_clear_error(
    burst: Path, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["analyze", str(burst), "--peak-horizon", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--peak-horizon" in err and message in err
