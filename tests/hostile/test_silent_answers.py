"""Inputs that got a silent or misleading answer (issue 22, item 9): each now gets a word.

Pins: `--columns` did not imply the CSV format, so the docs/inputs.md example
failed with "cannot tell the format"; `analyze --start -1h` failed with
"expected one argument" (only `--start=-1h` worked).
"""

from __future__ import annotations

import json
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


# -- GPUs a topology leaves out, pipelines that differ ----------------------------------


def sample_trace(path: Path, gpus: list[int], *, header: list[int], stages: list[list[int]]
                 | None = None, seconds: int = 60) -> Path:  # fmt: skip
    """A trace whose header lists `header` (and `stages`), with samples of `gpus`."""
    head: dict[str, object] = {"bubblewatch_trace": 1, "gpus": [{"index": g} for g in header]}
    if stages is not None:
        head["topology"] = {"stages": stages, "source": "static"}
    lines = [json.dumps(head)]
    for t in range(seconds):
        for g in gpus:
            busy = 0.9 if (t + g) % len(gpus) == 0 else 0.1
            lines.append(json.dumps({"type": "sample", "t": float(t), "gpu": g,
                                     "power_avg_w": 100 + 500 * busy, "sm_active_ratio": busy,
                                     "kernel_busy_ratio": 1.0}))  # fmt: skip
    return write(path, "\n".join(lines) + "\n")


def test_samples_of_a_gpu_the_topology_does_not_name_are_mentioned(tmp_path: Path, capsys) -> None:
    """Samples of GPU 5 under a header naming GPUs 0 and 1 were dropped without a word."""
    p = sample_trace(tmp_path / "t.jsonl", [0, 5], header=[0, 1], stages=[[0], [1]])
    assert main(["analyze", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "insufficient_data"
    reason = doc["findings"][0]["summary"]
    assert "GPU(s) [1] of the topology have no samples" in reason
    assert "samples came from GPU(s) [5], which it does not name" in reason


def test_pp_size_covering_part_of_the_recording_says_which_gpus_are_left_out(
    tmp_path: Path, capsys
) -> None:
    """`--pp-size 3` on an 8-GPU trace analysed GPUs 0-2 silently."""
    p = sample_trace(tmp_path / "t.jsonl", list(range(8)), header=list(range(8)))
    assert main(["analyze", "--json", str(p), "--pp-size", "3"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["evidence"]["pp_size"] == 3
    assert ("note: --pp-size/--tp-size 3 x 1 covers GPU(s) 0-2; the recording's GPU(s) 3-7 "
            "are not analysed") in captured.err  # fmt: skip
    assert main(["analyze", "--json", str(p), "--pp-size", "4", "--tp-size", "2"]) == 0
    assert "not analysed" not in capsys.readouterr().err  # all 8 GPUs covered: no note


def test_compare_of_different_pipelines_warns(tmp_path: Path, capsys) -> None:
    """A PP8 against a PP4 recording reported "x3.44" with no word that they differ."""
    pp8 = sample_trace(tmp_path / "pp8.jsonl", list(range(8)), header=list(range(8)),
                       stages=[[g] for g in range(8)])  # fmt: skip
    pp4 = sample_trace(tmp_path / "pp4.jsonl", list(range(4)), header=list(range(4)),
                       stages=[[g] for g in range(4)])  # fmt: skip
    warning = ("BEFORE is PP 8 on 8 GPU(s), AFTER PP 4 on 4 GPU(s): the changes compare "
               "different pipelines")  # fmt: skip
    assert main(["compare", str(pp8), str(pp4)]) == 0
    assert capsys.readouterr().out.startswith(f"warning: {warning}")
    assert main(["compare", "--json", str(pp8), str(pp4)]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"][0].startswith(warning)
    assert main(["compare", "--json", str(pp8), str(pp8)]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []
