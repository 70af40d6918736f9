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
