"""The shipped rule set: loads cleanly, its rule tests pass, docs and package copy are in sync."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.rules import load_rules
from bubblewatch.rules.schema import facts_markdown
from bubblewatch.rules.testing import run_test_file

ROOT = Path(__file__).resolve().parents[2]
TEST_FILES = sorted((ROOT / "rules" / "tests").glob("*.yaml"))


def test_shipped_rules_load() -> None:
    rules = load_rules()
    assert len(rules) >= 14
    assert {"PipelineSerializedUnderLoad", "CudaGraphsDisabledSGLang"} <= set(rules.names)


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_rule_test_file_passes(path: Path) -> None:
    result = run_test_file(path)
    assert result.error is None, result.error
    failed = [(c.name, c.problems) for c in result.cases if not c.ok]
    assert not failed


def test_every_shipped_rule_fires_in_some_rule_test() -> None:
    fired = {n for p in TEST_FILES for c in run_test_file(p).cases for n in c.fired}
    assert set(load_rules().names) - fired == set()


def test_every_shipped_rule_has_rationale_in_docs() -> None:
    doc = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    missing = [n for n in load_rules().names if f"`{n}`" not in doc]
    assert not missing


def test_package_copy_matches_rules_dir() -> None:
    src = sorted((ROOT / "rules").glob("*.rules.yaml"))
    pkg = ROOT / "bubblewatch" / "rules" / "shipped"
    assert src
    for f in src:
        copy = pkg / f.name
        assert copy.read_text() == f.read_text(), f"cp {f} {copy}"


def test_docs_facts_md_is_generated_from_schema() -> None:
    assert (ROOT / "docs" / "facts.md").read_text(encoding="utf-8") == facts_markdown(), (
        "regenerate: bubblewatch rules facts > docs/facts.md"
    )


def test_cli_rules_test_on_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["rules", "test", *map(str, TEST_FILES)])
    out = capsys.readouterr().out
    assert rc == 0
    assert " 0 failed" in out
