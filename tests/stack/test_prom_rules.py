"""The shipped Prometheus rules: promtool-clean, unit-tested, with runbooks, on exported series."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from bubblewatch.detect.types import Verdict

from .conftest import run_promtool
from .dashboard_util import (
    ROOT,
    RULE_FILE,
    RULE_TESTS,
    PromRule,
    build_module,
    load_rules,
    metric_names,
)

RUNBOOKS = ROOT / "docs" / "runbooks.md"
SEVERITIES = {"critical", "warning", "info"}
# Alerts the operator stack needs (issue 7): each must exist and be unit-tested.
REQUIRED_ALERTS = {
    "BubblewatchPipelineSerializedUnderLoad",
    "BubblewatchLaunchBoundStage",
    "BubblewatchStraggler",
    "BubblewatchDown",
    "BubblewatchStale",
    "BubblewatchNvmlErrors",
    "BubblewatchWebhookQueueBackingUp",
}


@pytest.fixture(scope="module")
def rules() -> list[PromRule]:
    return load_rules()


def _alerts(rules: list[PromRule]) -> list[PromRule]:
    return [r for r in rules if r.kind == "alert"]


def test_promtool_check_rules_is_clean(promtool):
    out = run_promtool(promtool, ["check", "rules", RULE_FILE])
    n = len(load_rules())
    assert f"SUCCESS: {n} rules found" in out, out
    assert "WARNING" not in out.upper().replace("SUCCESS", ""), out


def test_promtool_unit_tests_pass(promtool):
    assert RULE_TESTS, "no promtool tests under rules/prometheus/tests/"
    out = run_promtool(promtool, ["test", "rules", *RULE_TESTS])
    assert "SUCCESS" in out, out


def test_promtool_unit_tests_can_fail(promtool, tmp_path):
    """The unit tests have teeth: the same tests against rules whose alerts never fire fail."""
    broken = yaml.safe_load(RULE_FILE.read_text())
    for group in broken["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["expr"] = f"({rule['expr']}) and on() vector(0) > 1"
    (tmp_path / "bubblewatch.rules.yml").write_text(yaml.safe_dump(broken))
    tests = tmp_path / "tests"
    tests.mkdir()
    for t in RULE_TESTS:
        (tests / t.name).write_text(t.read_text())
    proc = subprocess.run(
        [promtool, "test", "rules", *(str(tests / t.name) for t in RULE_TESTS)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    failed = set(re.findall(r"alertname: (\w+)", proc.stdout + proc.stderr))
    assert failed >= REQUIRED_ALERTS, (
        f"alerts whose tests did not notice: {REQUIRED_ALERTS - failed}"
    )


def test_every_required_alert_exists(rules):
    assert {r.name for r in _alerts(rules)} >= REQUIRED_ALERTS


def test_every_alert_is_unit_tested_firing(rules):
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r.name for r in _alerts(rules)}
    assert names - fired == set(), "alerts no test expects to fire"
    assert names - quiet == set(), "alerts no test expects to stay quiet"


def test_every_alert_has_severity_summary_and_runbook(rules):
    anchors = _anchors(RUNBOOKS.read_text(encoding="utf-8"))
    for rule in _alerts(rules):
        labels = rule.body.get("labels", {})
        notes = rule.body.get("annotations", {})
        assert labels.get("severity") in SEVERITIES, rule.name
        assert notes.get("summary") and notes.get("description"), rule.name
        assert len(notes.get("runbook", "")) > 40, f"{rule.name}: runbook text too thin"
        url = notes.get("runbook_url", "")
        assert url.startswith("docs/runbooks.md#"), f"{rule.name}: {url!r}"
        assert url.split("#", 1)[1] in anchors, f"{rule.name}: no section {url} in docs/runbooks.md"


def _anchors(markdown: str) -> set[str]:
    """GitHub-style anchors of the markdown's headings."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_rules_read_only_known_series(rules, known_series):
    for rule in rules:
        unknown = metric_names(rule.expr) - known_series
        assert not unknown, f"{rule.kind} {rule.name} reads series nobody exports: {unknown}"


def test_recording_rules_are_named_level_metric_ops(rules):
    for rule in rules:
        if rule.kind == "record":
            assert re.fullmatch(r"[a-z_]+:bubblewatch_[a-z_]+:[a-z0-9_]+", rule.name), rule.name


def test_verdict_code_rule_covers_every_verdict(rules):
    """The verdict-as-number rule and the dashboards' value mappings agree with Verdict."""
    verdict_codes = build_module().VERDICT_CODES
    (rule,) = [r for r in rules if r.name == "pipeline:bubblewatch_pipeline_verdict:code"]
    in_rule = {
        name: int(code) for name, code in re.findall(r'verdict="(\w+)"\}\s*\*\s*(\d+)', rule.expr)
    }
    assert in_rule == {name: code for code, name, _ in verdict_codes}
    assert set(in_rule) == {v.value for v in Verdict}


def test_serialized_alert_names_a_shipped_recommendation_rule(rules):
    """The under-load alert excludes pipelines where a shipped recommendation says load-limited."""
    (alert,) = [r for r in rules if r.name == "BubblewatchPipelineSerializedUnderLoad"]
    referenced = set(re.findall(r'rule="(\w+)"', alert.expr))
    shipped = yaml.safe_load((ROOT / "rules" / "bubblewatch.rules.yaml").read_text())
    names = {r["name"] for g in shipped["groups"] for r in g["rules"]}
    assert referenced and referenced <= names


def test_metric_name_extraction():
    """The helper the name checks rely on: selectors counted, functions and labels not."""
    expr = (
        'sum by (job, pipeline) (rate(a_total{x="b_total"}[5m] offset 1h)) '
        "/ on (job) group_left (stage) c:d:e * 1e6 + time() - histogram_quantile(0.9, f) "
        "and bool g"
    )
    assert metric_names(expr) == {"a_total", "c:d:e", "f", "g"}
