"""Inputs that got a silent or misleading answer (issue 22, item 9): each now gets a word.

Pins: `--columns` did not imply the CSV format, so the docs/inputs.md example
failed with "cannot tell the format"; `analyze --start -1h` failed with
"expected one argument" (only `--start=-1h` worked).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.cli.main import build_parser, main

from .test_recorded_inputs import write

CARD_LOG = "t,card,Leistung,busy\n" + "".join(f"{t},{g},{300 + g},{50 + g}\n"
                                             for t in range(30) for g in range(2))  # fmt: skip
DOCS_COLUMNS = "time=t,gpu=card,power_avg_w=Leistung,kernel_busy_ratio=busy@percent"


def test_columns_imply_the_csv_format(tmp_path: Path, capsys) -> None:
    """The docs/inputs.md example, as written there (no --format)."""
    p = write(tmp_path / "card-log.csv", CARD_LOG)
    assert main(["analyze", "--json", str(p), "--columns", DOCS_COLUMNS]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert '"verdict"' in out and "cannot tell the format" not in out


def test_columns_still_refuse_a_file_that_is_not_that_csv(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "other.csv", "a,b\n1,2\n")
    assert main(["analyze", str(p), "--columns", DOCS_COLUMNS]) == 2
    assert "--columns maps 'time' to 't', which the header does not have" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1h", "-30m", "-1.5d", "-90s", "-5"])
@pytest.mark.parametrize("flag", ["--start", "--end"])
def test_relative_times_after_a_space(flag: str, value: str) -> None:
    args = build_parser().parse_args(["analyze", "--prometheus", "http://p", flag, value])
    assert getattr(args, {"--start": "prom_start", "--end": "prom_end"}[flag]) == value
    args = build_parser().parse_args(["fleet", "--prometheus", "http://p", flag, value])
    assert getattr(args, flag[2:]) == value


def test_an_unknown_option_is_still_refused(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["analyze", "--prometheus", "http://p", "--start", "-1h", "-x"])
    assert e.value.code == 2
    assert "unrecognized arguments: -x" in capsys.readouterr().err
