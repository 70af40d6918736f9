"""Reading the shipped Grafana dashboards and Prometheus rules as data, for the stack tests.

The end-to-end test reuses these: `panel_queries` lists every query of every
panel, `render` turns one into plain PromQL the way Grafana would (template
variables substituted), and `metric_names` says which series it reads.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "dashboards"
RULES_DIR = ROOT / "rules" / "prometheus"
RULE_FILE = RULES_DIR / "bubblewatch.rules.yml"
RULE_TESTS = sorted((RULES_DIR / "tests").glob("*.yml"))

# Grafana's own variables, and what they stand for when a test renders a query.
BUILTIN_DEFAULTS: Mapping[str, str] = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "1h",
}

_VAR = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


@dataclass(frozen=True)
class PanelQuery:
    """One query of one panel: where it is, and its PromQL with template variables."""

    dashboard: str
    panel_id: int
    panel_title: str
    ref_id: str
    expr: str
    instant: bool

    def where(self) -> str:
        return f"{self.dashboard} panel {self.panel_id} {self.panel_title!r} query {self.ref_id}"


def build_module() -> ModuleType:
    """dashboards/build.py, the dashboards' source, loaded as a module.

    Skips without Grafana's SDK (grafana-foundation-sdk, Python 3.11 or newer),
    which build.py builds the dashboards with.
    """
    pytest.importorskip("grafana_foundation_sdk", reason="dashboards/build.py needs it")
    spec = importlib.util.spec_from_file_location(
        "bubblewatch_dashboards", DASHBOARD_DIR / "build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def dashboard_paths() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json"))


def load_dashboard(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a dashboard is a JSON object, got {type(data).__name__}")
    return data


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside collapsed rows (which nest their panels)."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def panel_queries(dashboard: Mapping[str, Any]) -> list[PanelQuery]:
    """Every query of every non-row panel, in panel order."""
    uid = str(dashboard.get("uid", "?"))
    out = []
    for panel in iter_panels(dashboard):
        for target in panel.get("targets", []):
            out.append(
                PanelQuery(
                    dashboard=uid,
                    panel_id=int(panel["id"]),
                    panel_title=str(panel.get("title", "")),
                    ref_id=str(target.get("refId", "")),
                    expr=str(target.get("expr", "")),
                    instant=bool(target.get("instant", False)),
                )
            )
    return out


def template_variables(dashboard: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}


def variables_used(text: str) -> set[str]:
    return {a or b for a, b in _VAR.findall(text)}


def render(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with `$var`, `${var}` and `${var:fmt}` replaced, Grafana's built-ins included.

    Raises KeyError naming a variable that neither `values` nor the built-ins define.
    """
    known = {**BUILTIN_DEFAULTS, **values}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in known:
            raise KeyError(f"template variable ${name} has no value (known: {sorted(known)})")
        return known[name]

    return _VAR.sub(sub, expr)


# -- metric names in PromQL, without a parser ---------------------------------

_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
    ]
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'" + r"|`[^`]*`")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_NUMBER = re.compile(r"(?<![\w:])(?:0x[0-9a-f]+|\d+(?:\.\d*)?(?:e[+-]?\d+)?)", re.IGNORECASE)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (selectors' names, not functions or labels)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    text = _GROUPING.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        word = m.group(0)
        rest = text[m.end() :].lstrip()
        if word.lower() in _KEYWORDS or rest.startswith("("):
            continue  # a keyword or a function call
        names.add(word)
    return names


# -- the Prometheus rules ----------------------------------------------------


@dataclass(frozen=True)
class PromRule:
    group: str
    name: str  # the recorded series or the alert name
    kind: str  # "record" or "alert"
    expr: str
    body: Mapping[str, Any]


def load_rules(path: Path = RULE_FILE) -> list[PromRule]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = []
    for group in data["groups"]:
        for rule in group["rules"]:
            kind = "record" if "record" in rule else "alert"
            out.append(PromRule(group["name"], rule[kind], kind, str(rule["expr"]), rule))
    return out


def rule_file_for(exprs: Mapping[str, str]) -> str:
    """A Prometheus rule file that records each expression (name -> PromQL), for parse checks."""
    rules = [{"record": name, "expr": expr} for name, expr in exprs.items()]
    return yaml.safe_dump({"groups": [{"name": "parse-check", "rules": rules}]}, sort_keys=False)
