"""Hostile rule files and expressions (code, files, loops, memory) are rejected or bounded."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubblewatch.rules import RuleError
from bubblewatch.rules._expr_run import MAX_STEPS
from bubblewatch.rules._facts_coerce import default_facts_dict
from bubblewatch.rules.errors import EvalError, ExprError
from bubblewatch.rules.expr import compile_expr, to_activation
from bubblewatch.rules.loader import parse_rule_file
from bubblewatch.rules.template import compile_template

ACT = to_activation(default_facts_dict())
PLAIN = (bool, int, float, str, list, dict, type(None))


def _outcome(src: str) -> str:
    """'rejected' at load, 'error' when evaluating, or 'value' (always plain data, fast)."""
    try:
        expr = compile_expr(src)
    except ExprError as e:
        assert str(e)
        return "rejected"
    t0 = time.perf_counter()
    try:
        value = expr.evaluate(ACT)
    except EvalError as e:
        assert str(e)
        return "error"
    finally:
        assert time.perf_counter() - t0 < 2.0
    assert isinstance(value, PLAIN)
    return "value"


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HOSTILE = [
    "engine.__class__",
    "engine.__class__.__mro__",
    "__import__('os').system('id')",
    "import os",
    "open('/etc/passwd')",
    "exec('1')",
    "eval('1')",
    "getattr(engine, '__dict__')",
    "engine['__class__']",
    ".os.system('x')",
    "google.protobuf.Any{}",
    "timestamp('2020-01-01T00:00:00Z')",
    "lambda: 1",
    "[x for x in stages]",
    "while true {}",
    "stages.map(a, stages.map(b, stages.map(c, 1)))",
    "(" * 50 + "1" + ")" * 50,
    "1" + " + 1" * 400,
    "'a' * 100000000",
    "[1] * 100000000",
    "9" * 5000,
    "size('x' + 'x')" * 200,
]


@pytest.mark.parametrize("src", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_expressions_rejected_or_bounded(src: str) -> None:
    try:
        expr = compile_expr(src)
    except ExprError:
        return
    t0 = time.perf_counter()
    with pytest.raises(EvalError):
        expr.evaluate(ACT)
    assert time.perf_counter() - t0 < 2.0


def test_step_budget_stops_quadratic_macros() -> None:
    lst = "[" + ",".join(["1"] * 150) + "]"
    expr = compile_expr(f"{lst}.map(x, {lst}.map(y, x + y)).size() > 0")
    t0 = time.perf_counter()
    with pytest.raises(EvalError, match=f"exceeded {MAX_STEPS} steps"):
        expr.evaluate(ACT)
    assert time.perf_counter() - t0 < 2.0


@SETTINGS
@given(st.text(max_size=300))
def test_random_text_never_crashes_the_compiler(src: str) -> None:
    assert _outcome(src) in ("rejected", "error", "value")


_ATOMS = st.sampled_from(
    [
        "1",
        "2.5",
        "'s'",
        "null",
        "true",
        "engine.pp_size",
        "evidence.bubble_ratio",
        "diagnosis.verdict",
        "size(stages)",
        "load.running",
        "[1, 2]",
        "{'a': 1}",
    ]
)
_OPS = st.sampled_from([" + ", " - ", " * ", " / ", " % ", " == ", " < ", " && ", " || ", " in "])


@st.composite
def _exprs(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 6 or draw(st.booleans()):
        return draw(_ATOMS)
    kind = draw(st.integers(0, 3))
    a = draw(_exprs(depth + 1))
    if kind == 0:
        return f"{a}{draw(_OPS)}{draw(_exprs(depth + 1))}"
    if kind == 1:
        return f"({a})"
    if kind == 2:
        return f"!{a}"
    return f"stages.exists(s, s.stage > 0 && {a})"


@SETTINGS
@given(_exprs())
def test_generated_expressions_give_a_value_or_a_clean_error(src: str) -> None:
    assert _outcome(src) in ("rejected", "error", "value")


@SETTINGS
@given(st.text(max_size=400))
def test_random_templates_never_crash(src: str) -> None:
    try:
        t = compile_template(src)
    except ExprError:
        return
    try:
        text = t.render(ACT)
    except EvalError as e:
        assert str(e)
        return
    assert isinstance(text, str)


_YAML_BITS = st.sampled_from(
    [
        "version: 1\n",
        "groups:\n",
        "  - name: g\n",
        "    rules:\n",
        "      - name: R\n",
        "        expr: engine.pp_size > 1\n",
        "        summary: x\n",
        "        for: 5m\n",
        "        fix: {engine: sglang, add_flags: {--a: '{{ engine.pp_size }}'}}\n",
        "a: &x [1, 2]\n",
        "b: *x\n",
        "!!python/object/apply:os.system ['id']\n",
        "        expr: !!python/name:os.system\n",
        "[[[[[[[[[[\n",
        "\t\n",
        "- - -\n",
        "x: " + "[" * 200 + "]" * 200 + "\n",
        "        labels: {a: [1]}\n",
    ]
)


@SETTINGS
@given(st.lists(_YAML_BITS, max_size=12))
def test_random_rule_files_load_or_fail_cleanly(parts: list[str]) -> None:
    errors: list[RuleError] = []
    rules = parse_rule_file("".join(parts), "fuzz.rules.yaml", errors)
    assert all(isinstance(e, RuleError) and e.path == "fuzz.rules.yaml" for e in errors)
    assert all(r.name == "R" for r in rules)


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes_as_rule_file(data: bytes) -> None:
    errors: list[RuleError] = []
    rules = parse_rule_file(data.decode("utf-8", "replace"), "fuzz.rules.yaml", errors)
    assert rules == [] and all(e.path == "fuzz.rules.yaml" for e in errors)


def test_yaml_billion_laughs_rejected() -> None:
    bomb = "a: &a ['x','x']\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: [*c,*c]\n"
    errors: list[RuleError] = []
    parse_rule_file(bomb, "bomb.rules.yaml", errors)
    assert errors and "anchors and aliases are not allowed" in str(errors[0])


def test_python_tags_rejected() -> None:
    errors: list[RuleError] = []
    parse_rule_file("!!python/object/apply:os.system ['id']\n", "t.rules.yaml", errors)
    assert errors and "is not allowed" in str(errors[0])
