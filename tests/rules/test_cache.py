"""The rule set's private cache: a hit is the same set, any change or doubt is a rebuild."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from celpy.celparser import CELParser

from bubblewatch.rules import load_rules
from bubblewatch.rules._cache import CACHE_ENV, cache_dir, install_cel_parser

BODY = """\
version: 1
groups:
  - name: g
    rules:
      - name: {name}
        expr: diagnosis.verdict == "serialized"
        severity: warning
        summary: "s"
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(d))
    return d


def _file(tmp_path: Path, name: str) -> Path:
    p = tmp_path / "x.rules.yaml"
    p.write_text(BODY.format(name=name))
    return p


def test_hit_is_the_same_set_and_a_changed_file_is_read_again(tmp_path: Path, cache: Path) -> None:
    f = _file(tmp_path, "First")
    first = load_rules([f])
    assert [p.name for p in cache.glob("rules-*.pickle")]  # saved
    assert load_rules([f]) == first
    f.write_text(BODY.format(name="Second"))
    assert [r.name for r in load_rules([f]).rules] == ["Second"]


def test_shipped_set_from_cache_equals_the_checked_one(cache: Path) -> None:
    built = load_rules()
    assert load_rules() == built and len(built) > 10


def test_torn_or_foreign_file_is_a_miss(tmp_path: Path, cache: Path) -> None:
    f = _file(tmp_path, "First")
    load_rules([f])
    (slot,) = cache.glob("rules-*.pickle")
    slot.write_bytes(b"not a pickle")
    assert [r.name for r in load_rules([f]).rules] == ["First"]


def test_directory_others_can_write_is_not_used(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    assert cache_dir() == cache
    os.chmod(cache, 0o777)
    assert cache_dir() is None


def test_empty_variable_turns_the_cache_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, "")
    assert cache_dir() is None
    assert [r.name for r in load_rules([_file(tmp_path, "Uncached")]).rules] == ["Uncached"]


def test_cached_parser_parses_as_celpy_s_own(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CELParser, "CEL_PARSER", None)
    install_cel_parser()  # built and saved
    assert list(cache.glob("cel-lalr-*.pickle"))
    monkeypatch.setattr(CELParser, "CEL_PARSER", None)
    install_cel_parser()  # loaded from the file
    src = 'a.b > 1 && "x" in c && true'
    cached = CELParser.CEL_PARSER
    assert cached is not None
    monkeypatch.setattr(CELParser, "CEL_PARSER", None)
    own = CELParser()
    assert cached.parse(src) == own.parse(src)


def test_a_cached_expression_is_rebuilt_only_when_used_and_is_the_checked_one(
    cache: Path,
) -> None:
    """The cache keeps each parse tree as bytes of its own (a run evaluates a few)."""
    built = load_rules()
    hit = load_rules()
    exprs = [(b.expr, h.expr) for b, h in zip(built.rules, hit.rules, strict=True)]
    exprs += [
        (be, he)
        for b, h in zip(built.rules, hit.rules, strict=True)
        for (be, _), (he, _) in zip(b.summary.holes, h.summary.holes, strict=True)
    ]
    assert len(exprs) > 50
    assert all("tree" not in h.__dict__ for _, h in exprs)  # nothing rebuilt by the load
    for b, h in exprs:
        assert h.source == b.source and h.tree == b.tree  # lark trees compare node by node
        assert "tree" in h.__dict__  # rebuilt once, kept
    with pytest.raises(AttributeError):
        _ = hit.rules[0].expr.no_such_attribute
