"""The README's abridged seed output is what its own two commands print (issue 18)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bubblewatch.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _readme_block() -> tuple[list[str], list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = text.index("Abridged output of `bubblewatch analyze` on the simulated seed case")
    cmds = re.findall(r"`(bubblewatch (?:simulate|analyze) [^`]*)`", text[intro : intro + 800])
    start = text.index("```\n", intro) + 4
    block = text[start : text.index("```", start)].splitlines()
    return cmds, block


@pytest.mark.slow
def test_readme_seed_output_reproduces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cmds, block = _readme_block()
    assert len(cmds) == 2, cmds
    trace = tmp_path / "t.jsonl"
    for cmd in cmds:
        argv = shlex.split(cmd.replace("\n", " "))[1:]
        argv = [str(trace) if a == "t.jsonl" else a for a in argv]
        assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    # Every line the README shows is printed, in order; `...` stands for lines cut.
    i = 0
    for line in block:
        if line.strip() == "...":
            continue
        want = line.split("... ", 1)[1] if line.lstrip().startswith("... ") else line
        partial = line.rstrip().endswith("...") or line.lstrip().startswith("... ")
        want = want[: -len("...")].rstrip() if want.rstrip().endswith("...") else want
        while i < len(out) and not (want in out[i] if partial else out[i] == want):
            i += 1
        assert i < len(out), f"README line not in the output (in order): {line!r}"
        i += 1
