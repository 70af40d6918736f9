"""`analyze` input errors: each names what is wrong and exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.cli.main import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "docs" / "examples" / "small-trace.jsonl")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prometheus", "http://127.0.0.1:9"], "--prometheus needs --start"),
        (["some.jsonl", "--prometheus", "http://127.0.0.1:9", "--start=-1h"], "not both"),
        ([], "give a FILE to analyse, or --prometheus URL"),
        ([EXAMPLE, "--engine-cmdline", "python -m sglang.launch_server 'unclosed"], "cannot split"),
    ],
)
def test_bad_analyze_input_exits_2_with_the_reason(capsys, argv, message):
    assert main(["analyze", *argv]) == 2
    assert message in capsys.readouterr().err


def _node_csv(path, power: float) -> str:
    rows = ["timestamp,gpu,power_w,gpu_util_pct"]
    for k in range(30):
        for g in range(2):
            rows.append(f"{1775333003 + k},{g},{power + k % 3},0")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_analyze_joins_one_file_per_node(tmp_path, capsys):
    import json

    a = _node_csv(tmp_path / "node0.csv", 120.0)
    b = _node_csv(tmp_path / "node1.csv", 121.0)
    assert main(["analyze", a, b, "--pp-size", "2", "--tp-size", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["topology"]["stages"] == [[0, 1], [2, 3]]
    assert [s["gpus"] for s in out["stages"]] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--columns", "gpu"], "--columns: column mapping 'gpu' must look like KEY=HEADER"),
        (["--columns", "power_avg_w=Watts"], "which the header does not have"),
    ],
)
def test_analyze_column_mapping_errors_exit_2(tmp_path, capsys, extra, message):
    a = _node_csv(tmp_path / "node0.csv", 120.0)
    assert main(["analyze", a, *extra]) == 2
    assert message in capsys.readouterr().err
