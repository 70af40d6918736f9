"""The shipped Grafana dashboards: importable, datasource as a variable, every query valid."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import run_promtool
from .dashboard_util import (
    DASHBOARD_DIR,
    build_module,
    dashboard_paths,
    iter_panels,
    load_dashboard,
    metric_names,
    panel_queries,
    render,
    rule_file_for,
    template_variables,
    variables_used,
)

EXPECTED = {"bubblewatch-overview.json", "bubblewatch-pipeline.json"}
DS_REF = {"type": "prometheus", "uid": "${datasource}"}
# What the parse check substitutes: multi-value variables as Grafana renders them.
SAMPLE_VALUES = {"instance": "(gpu-1:9842|gpu-2:9842)", "pipeline": "gpu-1/sglang:30000"}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def dashboard(request) -> dict[str, Any]:
    return load_dashboard(DASHBOARD_DIR / request.param)


def test_both_dashboards_ship():
    assert {p.name for p in dashboard_paths()} == EXPECTED


def test_committed_json_is_what_build_py_writes(tmp_path):
    """The JSON is generated; an edit by hand (or a stale file) fails here."""
    build = build_module()
    assert build.main(["--check"]) == 0, "run: python dashboards/build.py"
    assert build.main(["--out", str(tmp_path)]) == 0
    for name in EXPECTED:
        assert (tmp_path / name).read_text() == (DASHBOARD_DIR / name).read_text()


def test_grafana_10_model(dashboard):
    assert dashboard["schemaVersion"] >= 36
    assert dashboard.get("id") is None, "an exported id ties the dashboard to one install"
    assert re.fullmatch(r"bubblewatch-[a-z]+", dashboard["uid"])
    assert len(dashboard["uid"]) <= 40
    assert dashboard["title"].startswith("bubblewatch / ")
    assert "bubblewatch" in dashboard["tags"]


def _walk(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + "/" + k, k, v
            yield from _walk(v, path + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_datasource_is_only_ever_the_variable(dashboard):
    refs = [(p, v) for p, k, v in _walk(dashboard) if k == "datasource"]
    assert refs, "no datasource references at all"
    for path, value in refs:
        assert value == DS_REF, f"{path}: {value!r} (must be the ${{datasource}} variable)"
    uids = [(p, v) for p, k, v in _walk(dashboard) if k == "uid"]
    for path, value in uids:
        assert path == "/uid" or value == "${datasource}", f"{path}: hard-coded uid {value!r}"


def test_template_variables(dashboard):
    tv = template_variables(dashboard)
    assert {"datasource", "instance", "pipeline"} <= set(tv)
    ds = tv["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name in ("instance", "pipeline"):
        assert tv[name]["type"] == "query"
        assert tv[name]["query"].startswith("label_values(")
        assert tv[name].get("current", {}) == {}, f"{name}: a saved selection from one install"


def test_every_panel_has_queries_and_a_description(dashboard):
    panels = [p for p in iter_panels(dashboard) if p["type"] != "row"]
    assert len(panels) >= 6
    for p in panels:
        assert p.get("targets"), f"panel {p['id']} {p['title']!r} has no query"
        for t in p["targets"]:
            assert t["expr"].strip(), f"panel {p['id']} query {t['refId']} is empty"
        assert len(p.get("description", "")) > 20, f"panel {p['title']!r}: describe it"


def test_panel_ids_unique_and_grid_does_not_overlap(dashboard):
    panels = list(iter_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], int] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, f"panel {p['id']} outside the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"panels {taken[(x, y)]} and {p['id']} overlap"
                taken[(x, y)] = p["id"]


def test_queries_filter_by_the_template_variables(dashboard):
    defined = set(template_variables(dashboard))
    for q in panel_queries(dashboard):
        used = variables_used(q.expr) - {"__rate_interval", "__interval", "__range"}
        assert used & {"instance", "pipeline"}, f"{q.where()} ignores $instance and $pipeline"
        assert used <= defined, f"{q.where()} uses undefined {used - defined}"
        # Variables only inside label matchers: anywhere else they would not be valid PromQL.
        outside = re.sub(r'"[^"]*"', "", re.sub(r"\[[^\]]*\]", "", q.expr))
        assert "$" not in outside, f"{q.where()}: a variable outside a matcher or range"


def test_queries_read_only_known_series(dashboard, known_series):
    for q in panel_queries(dashboard):
        unknown = metric_names(q.expr) - known_series
        assert not unknown, f"{q.where()} reads series nobody exports or records: {unknown}"
    for name, var in template_variables(dashboard).items():
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+)(?:\{.*\})?, *(\w+)\)", var["query"])
            assert m, f"variable {name}: {var['query']!r}"
            assert m.group(1) in known_series


def test_every_panel_query_parses(promtool, tmp_path):
    """promtool checks PromQL offline: each query, rendered, becomes a recording rule."""
    exprs = {}
    for path in dashboard_paths():
        for q in panel_queries(load_dashboard(path)):
            name = f"parse_check:{q.dashboard.replace('-', '_')}:panel{q.panel_id}_{q.ref_id}"
            exprs[name] = render(q.expr, SAMPLE_VALUES)
    assert len(exprs) >= 20
    rules = tmp_path / "panels.rules.yml"
    rules.write_text(rule_file_for(exprs))
    out = run_promtool(promtool, ["check", "rules", rules])
    assert f"SUCCESS: {len(exprs)} rules found" in out


def test_parse_check_rejects_bad_promql(promtool, tmp_path):
    """The trick above catches a broken query (so its success means something)."""
    rules = tmp_path / "bad.rules.yml"
    rules.write_text(rule_file_for({"parse_check:bad": 'sum by (pipeline (x{a="b"})'}))
    proc = subprocess.run(
        [promtool, "check", "rules", str(rules)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "parse" in (proc.stdout + proc.stderr).lower()


def test_render_substitutes_every_form():
    expr = 'rate(x{a=~"$instance", b="${pipeline}", c=~"${instance:regex}"}[$__rate_interval])'
    assert render(expr, {"instance": "i", "pipeline": "p"}) == (
        'rate(x{a=~"i", b="p", c=~"i"}[1m])'
    )
    with pytest.raises(KeyError, match=r"\$stage"):
        render('x{s="$stage"}', {})


def test_overview_shows_what_the_issue_asks():
    titles = {
        p["title"] for p in iter_panels(load_dashboard(DASHBOARD_DIR / "bubblewatch-overview.json"))
    }
    for want in ("Pipelines", "Bubble ratio", "Effective concurrency vs stages",
                 "Active recommendations", "Bubble energy (time range)"):  # fmt: skip
        assert want in titles


def test_pipeline_dashboard_shows_what_the_issue_asks():
    d = load_dashboard(DASHBOARD_DIR / "bubblewatch-pipeline.json")
    by_title = {p["title"]: p for p in iter_panels(d)}
    assert by_title["Stage occupancy"]["type"] in ("state-timeline", "heatmap")
    for want in ("Power by GPU", "SM activity by GPU", "Stage lag", "Throttle reasons",
                 "Engine settings", "Up", "Last sample age", "NVML errors"):  # fmt: skip
        assert want in by_title
    # Per-GPU panels are labelled with the stage (joined through bubblewatch_gpu_info).
    for title in ("Power by GPU", "SM activity by GPU"):
        (t,) = by_title[title]["targets"]
        assert "{{stage}}" in t["legendFormat"]
        assert "stage" in t["expr"]


def test_provisioning_files(tmp_path):
    prov = DASHBOARD_DIR / "provisioning"
    dash = yaml.safe_load((prov / "dashboards.yml").read_text())
    assert dash["apiVersion"] == 1
    (provider,) = dash["providers"]
    assert provider["type"] == "file"
    assert Path(provider["options"]["path"]).is_absolute()
    ds = yaml.safe_load((prov / "datasources.yml").read_text())
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
