"""Rule tests written against a recording: facts come from the detector, as in `analyze`."""

from __future__ import annotations

import shutil
from pathlib import Path

from bubblewatch.rules.testing import run_test_file

SHIPPED = Path(__file__).resolve().parents[2] / "rules"


def _write(tmp_path: Path, body: str) -> Path:
    shutil.copytree(SHIPPED / "tests" / "traces", tmp_path / "traces")
    path = tmp_path / "case.yaml"
    path.write_text(f"rule_files: [{SHIPPED / 'bubblewatch.rules.yaml'}]\ntests:\n{body}")
    return path


def test_a_wrong_expectation_on_a_trace_fails(tmp_path):
    path = _write(
        tmp_path,
        "  - name: serialized trace said healthy\n"
        "    trace: traces/pp8-serialized.jsonl.gz\n"
        "    engine_cmdline: python -m sglang.launch_server --pp-size 8 --disable-cuda-graph\n"
        "    expect_not_fire: [PipelineSerializedUnderLoad]\n",
    )
    result = run_test_file(path)
    assert result.error is None
    (case,) = result.cases
    assert not case.ok
    assert "PipelineSerializedUnderLoad" in case.fired
    assert any("expected PipelineSerializedUnderLoad not to fire" in p for p in case.problems)


def test_a_missing_trace_is_a_clear_error(tmp_path):
    path = _write(
        tmp_path,
        "  - name: no such file\n    trace: traces/nope.jsonl\n    expect_fire: []\n",
    )
    result = run_test_file(path)
    assert result.error is not None
    assert "test 'no such file': cannot read the trace" in result.error
    assert "nope.jsonl" in result.error


def test_trace_and_facts_together_are_refused(tmp_path):
    path = _write(
        tmp_path,
        "  - name: both\n"
        "    trace: traces/pp8-async.jsonl.gz\n"
        "    facts: {diagnosis: {verdict: healthy}}\n",
    )
    result = run_test_file(path)
    assert result.error is not None
    assert "give either 'trace' or 'facts', not both" in result.error
