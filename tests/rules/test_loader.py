"""Rule files: errors name file, line, rule and field; reload is atomic."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from bubblewatch.cli.main import main
from bubblewatch.rules import RuleEngine, RuleError, check_paths, load_rules

GOOD = """\
version: 1
groups:
  - name: g
    rules:
      - name: Serialized
        expr: diagnosis.verdict == "serialized"
        for: 1m30s
        severity: warning
        summary: "pp {{ engine.pp_size }}"
"""


def _write(tmp_path: Path, body: str, name: str = "x.rules.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_good_file_loads(tmp_path: Path) -> None:
    rules = load_rules([_write(tmp_path, GOOD)])
    (rule,) = rules.rules
    assert rule.name == "Serialized" and rule.for_s == 90.0 and rule.line == 5


@pytest.mark.parametrize(
    ("old", "new", "line", "needle"),
    [
        (
            'diagnosis.verdict == "serialized"',
            "engine.pp_sise > 1",
            6,
            "unknown fact engine.pp_sise",
        ),
        ('diagnosis.verdict == "serialized"', "enigne.pp_size > 1", 6, "unknown name 'enigne'"),
        ('diagnosis.verdict == "serialized"', "engine.flags.x", 6, 'engine.flags["x"]'),
        ('diagnosis.verdict == "serialized"', "open('/etc/passwd')", 6, "unknown function 'open'"),
        ("for: 1m30s", "for: soon", 7, "'for' must be a duration"),
        ("severity: warning", "severity: loud", 8, "'severity' must be"),
        ('summary: "pp {{ engine.pp_size }}"', 'summary: "{{ engine.nope }}"', 9, "engine.nope"),
        ('summary: "pp {{ engine.pp_size }}"', "summaryy: x", 9, "unknown key 'summaryy'"),
        ("version: 1", "version: 2", 1, "'version: 1' is required"),
    ],
)
def test_errors_name_file_line_rule(
    tmp_path: Path, old: str, new: str, line: int, needle: str
) -> None:
    p = _write(tmp_path, GOOD.replace(old, new))
    _, errors = check_paths([p])
    assert errors, "expected an error"
    e = errors[0]
    assert e.path == str(p) and e.line == line
    assert needle in str(e)
    if line > 1:
        assert "rule 'Serialized'" in str(e)


def test_fix_flags_need_an_engine(tmp_path: Path) -> None:
    body = GOOD + "        fix: {add_flags: {--x: '1'}}\n"
    with pytest.raises(RuleError, match="must name its 'engine'"):
        load_rules([_write(tmp_path, body)])


def test_duplicate_rule_names_across_files(tmp_path: Path) -> None:
    a = _write(tmp_path, GOOD, "a.rules.yaml")
    _write(tmp_path, GOOD, "b.rules.yaml")
    _, errors = check_paths([tmp_path])
    assert len(errors) == 1 and "duplicate rule name" in str(errors[0])
    assert f"first defined at {a}:5" in str(errors[0])


def test_all_errors_collected(tmp_path: Path) -> None:
    body = GOOD + GOOD.split("rules:\n", 1)[1].replace("Serialized", "B").replace(
        'diagnosis.verdict == "serialized"', "nope"
    ).replace("pp {{", "{{ nope2 }} {{")
    body = body.replace('diagnosis.verdict == "serialized"', "nope0", 1)
    _, errors = check_paths([_write(tmp_path, body)])
    assert [e.rule for e in errors] == ["Serialized", "B"]


def test_params_are_checked_per_file(tmp_path: Path) -> None:
    body = GOOD.replace("groups:", "params: {limit: 2}\ngroups:").replace(
        'diagnosis.verdict == "serialized"', "engine.pp_size > params.limitt"
    )
    with pytest.raises(RuleError, match=r"unknown parameter 'params\.limitt'.*limit"):
        load_rules([_write(tmp_path, body)])


def test_reload_is_atomic(tmp_path: Path) -> None:
    good = _write(tmp_path, GOOD)
    engine = RuleEngine()
    assert engine.reload([good]).ok
    before = engine.rules
    bad = _write(tmp_path, GOOD.replace("engine.pp_size", "engine.bogus"), "bad.rules.yaml")
    result = engine.reload([good, bad])
    assert not result.ok and result.error is not None and "engine.bogus" in result.error
    assert engine.rules is before and engine.rules.names == ("Serialized",)


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="no such file"):
        load_rules([tmp_path / "absent.rules.yaml"])


def test_cli_check_reports_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad rule file exits 2, as bad input does everywhere (it was 1)."""
    p = _write(tmp_path, GOOD.replace("engine.pp_size", "engine.bogus"))
    assert main(["rules", "check", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:9" in err and "rule 'Serialized'" in err and "engine.bogus" in err
    assert main(["rules", "check", "--json", str(p)]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["errors"][0]["line"] == 9
    assert out["errors"][0]["rule"] == "Serialized"


def test_cli_check_warns_on_unguarded_null(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = _write(
        tmp_path, GOOD.replace('diagnosis.verdict == "serialized"', "evidence.bubble_ratio > 0.5")
    )
    assert main(["rules", "check", "--json", str(p)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and "fails when facts are unknown" in out["warnings"][0]


def test_cli_test_of_an_unreadable_test_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.test.yaml"
    bad.write_text("cases: [\n")
    assert main(["rules", "test", str(bad)]) == 2
    assert "broken.test.yaml" in capsys.readouterr().out
