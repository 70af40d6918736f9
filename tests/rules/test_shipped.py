"""The shipped rule set: loads cleanly, its rule tests pass, docs agree, a wheel carries it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.rules import load_rules
from bubblewatch.rules.loader import shipped_rules_dir
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


def test_the_package_links_to_the_one_copy() -> None:
    link = ROOT / "bubblewatch" / "rules" / "shipped"
    assert link.is_symlink()
    assert shipped_rules_dir() == (ROOT / "rules").resolve()


@pytest.mark.slow
def test_a_built_wheel_carries_the_rules_dir(tmp_path: Path) -> None:
    """The symbolic link resolves into the wheel's package data: the same bytes as rules/."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("bubblewatch", "rules"):
        shutil.copytree(ROOT / part, src / part, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("bubblewatch-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        packaged = {
            Path(n).name: whl.read(n)
            for n in whl.namelist()
            if n.startswith("bubblewatch/rules/shipped/")
        }
    expected = {f.name: f.read_bytes() for f in (ROOT / "rules").glob("*.rules.yaml")}
    assert expected
    assert packaged == expected


def test_docs_facts_md_is_generated_from_schema() -> None:
    assert (ROOT / "docs" / "facts.md").read_text(encoding="utf-8") == facts_markdown(), (
        "regenerate: bubblewatch rules facts > docs/facts.md"
    )


def test_cli_rules_test_on_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["rules", "test", *map(str, TEST_FILES)])
    out = capsys.readouterr().out
    assert rc == 0
    assert " 0 failed" in out
