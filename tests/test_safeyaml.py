"""The one YAML reader (bubblewatch.safeyaml) and every file reader built on it.

Each reader (rule files, rule tests, scenarios, daemon and web config, static
topology) gets the same malformed files and must name the file and the line
the problem is on, in its own error class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.web import load_web_config
from bubblewatch.errors import InputError
from bubblewatch.rules.loader import check_paths
from bubblewatch.rules.testing import run_test_file
from bubblewatch.safeyaml import YamlError, load_yaml_file, parse_yaml, yaml_value
from bubblewatch.sim.scenario import load_scenario
from bubblewatch.topology.static import load_static_pipelines


def _raised(read: Callable[[Path], object]) -> Callable[[Path], str]:
    def message(path: Path) -> str:
        with pytest.raises(InputError) as e:
            read(path)
        return str(e.value)

    return message


def _rule_file(path: Path) -> str:
    errors = check_paths([path])[1]
    assert len(errors) == 1, errors
    return str(errors[0])


def _rule_test(path: Path) -> str:
    error = run_test_file(path).error
    assert error is not None
    return error


READERS: dict[str, Callable[[Path], str]] = {
    "rule file": _rule_file,
    "rule test": _rule_test,
    "scenario": _raised(load_scenario),
    "daemon config": _raised(lambda p: load_config(p, env={})),
    "web config": _raised(load_web_config),
    "static topology": _raised(lambda p: load_static_pipelines(str(p))),
}

# Each problem sits on line 3 or 4 of a file that starts well, so a reader that
# reports line 1 (or no line) fails.
MALFORMED = {
    "syntax": ("version: 1\nlog:\n  level: info\n   bad: indent\n", 4, "not valid YAML"),
    "unclosed flow": ("version: 1\nx: 1\ny: [1, 2\nz: 3\n", 4, "not valid YAML"),
    "duplicate key": ("version: 1\nlog:\n  level: a\n  level: b\n", 4, "duplicate key 'level'"),
    "NUL": ("version: 1\nx: 1\ny: \0\n", 3, "unacceptable character #x0000"),
    "tab": ("version: 1\nx:\n\t- 1\n", 3, "not valid YAML"),
    "tag": ("version: 1\nx: 1\ny: !!binary aGk=\n", 3, "YAML tag"),
    "python tag": ("version: 1\nx: 1\ny: !!python/name:os.system\n", 3, "is not allowed"),
    "key": ("version: 1\nx:\n  1: a\n", 3, "mapping keys must be strings, got 1"),
    "int digits": ("version: 1\nx: 1\ny: " + "9" * 40 + "\n", 3, "more than 30 digits"),
    "two documents": ("version: 1\nx: 1\n---\ny: 2\n", 3, "expected a single document"),
    "merge key": ("version: 1\nb: &b {x: 1}\nc:\n  <<: *b\n", 4, "merge keys"),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("case", MALFORMED)
def test_every_reader_names_the_line(tmp_path: Path, reader: str, case: str) -> None:
    text, line, expect = MALFORMED[case]
    path = tmp_path / "f.yaml"
    path.write_text(text)
    message = READERS[reader](path)
    assert message.startswith(f"{path}:{line}: "), message
    assert expect in message, message


def test_rule_files_refuse_aliases_where_the_alias_is(tmp_path: Path) -> None:
    path = tmp_path / "a.rules.yaml"
    path.write_text("version: 1\ngroups:\n  - &g {name: a, rules: []}\n\n  - *g\n")
    message = _rule_file(path)
    assert message.startswith(f"{path}:5: field 'groups[1]': anchors and aliases"), message


def test_tree_lines_keys_and_paths() -> None:
    root = parse_yaml("a: 1\nb:\n  c: [x,\n    y]\n  d:\n    - {e: 2}\n", "t.yaml")
    assert root is not None
    assert root.plain() == {"a": 1, "b": {"c": ["x", "y"], "d": [{"e": 2}]}}
    assert dict(root.key_lines) == {"a": 1, "b": 2}
    assert dict(root.value["b"].key_lines) == {"c": 3, "d": 5}
    assert root.lines_by_path() == {
        "": 1, "a": 1, "b": 3, "b.c": 3, "b.c[0]": 3, "b.c[1]": 4,
        "b.d": 6, "b.d[0]": 6, "b.d[0].e": 6,
    }  # fmt: skip
    assert root.line_at("b", "c", 1) == 4
    assert root.line_at("b", "d", 0, "e") == 6
    assert root.line_at("b", "nope", 0) == 3  # the nearest parent that exists
    assert root.line_at("b", "c", 5) == 3
    assert root.line_at("b", "c", -1) == 3


def test_plain_scalars() -> None:
    root = parse_yaml("f: 1e12\ng: 2.5e-5\nd: 2025-01-01\nb: true\nn: null\ni: 0x10\n")
    assert root is not None
    assert root.plain() == {
        "f": 1e12,
        "g": 2.5e-5,
        "d": "2025-01-01",
        "b": True,
        "n": None,
        "i": 16,
    }


def test_empty_documents_and_values() -> None:
    assert parse_yaml("") is None
    assert parse_yaml("# only a comment\n") is None
    assert yaml_value("") is None
    assert yaml_value("[1, 2]") == [1, 2]
    with pytest.raises(YamlError, match="nests deeper than 64"):
        yaml_value("[" * 100 + "]" * 100)


def test_aliases_are_bounded_not_refused_by_default() -> None:
    root = parse_yaml("a: &a {x: 1}\nb: *a\n")
    assert root is not None and root.plain() == {"a": {"x": 1}, "b": {"x": 1}}
    with pytest.raises(YamlError, match=r"t\.yaml:2: field 'b': anchors and aliases"):
        parse_yaml("a: &a 1\nb: *a\n", "t.yaml", aliases=False)


def test_default_error_and_file_errors(tmp_path: Path) -> None:
    with pytest.raises(YamlError) as e:
        parse_yaml("a: 1\na: 2\n", "x.yaml")
    assert (e.value.path, e.value.line, e.value.field) == ("x.yaml", 2, "a")
    assert str(e.value) == "x.yaml:2: field 'a': duplicate key 'a'"
    missing = tmp_path / "missing.yaml"
    with pytest.raises(InputError, match=r"missing\.yaml: cannot read topology file: No such"):
        load_yaml_file(missing, InputError, what="topology file")
    (tmp_path / "latin1.yaml").write_bytes(b"a: \xe9\n")
    with pytest.raises(YamlError, match="cannot read: not UTF-8 text"):
        load_yaml_file(tmp_path / "latin1.yaml")
    (tmp_path / "big.yaml").write_text("a: 1\n# " + "x" * (1 << 20) + "\n")
    with pytest.raises(YamlError, match="larger than 1048576 bytes"):
        load_yaml_file(tmp_path / "big.yaml")
    with pytest.raises(YamlError, match="larger than 1048576 bytes"):
        parse_yaml("a: 1\n# " + "x" * (1 << 20) + "\n")
