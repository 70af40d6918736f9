"""Unit tests for rules, written in YAML (in the spirit of `promtool test rules`).

A test file names rule files and cases; each case gives facts (partial: the
rest is unknown) and optionally an engine command line, then says which
rules must fire, which must not, and what their output must contain. The
format is documented in docs/rules.md.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bubblewatch.limits import LimitError
from bubblewatch.rules.derived_facts import derive
from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.rules.errors import FactsError, RuleError
from bubblewatch.rules.evaluate import Evaluation, Recommendation, evaluate_detailed
from bubblewatch.rules.facts import Facts, facts_from_mapping
from bubblewatch.rules.loader import load_rules, parse_rule_yaml
from bubblewatch.rules.model import RuleSet
from bubblewatch.rules.training_facts import training_facts
from bubblewatch.safeyaml import YamlNode, read_yaml_text

_FILE_KEYS = {"rule_files", "tests"}
_CASE_KEYS = {
    "name",
    "facts",
    "engine_cmdline",
    "engine_env",
    "engine_version",
    "trace",
    "trace_format",
    "held_s",
    "params",
    "expect_fire",
    "expect_not_fire",
    "expect",
}
_EXPECT_KEYS = {
    "rule",
    "severity",
    "summary_contains",
    "description_contains",
    "command_contains",
    "command_not_contains",
    "diff_contains",
    "live_contains",
    "caveat_contains",
    "note_contains",
    "command_valid",
    "gain_factor_min",
    "gain_factor_max",
}


@dataclass(frozen=True)
class CaseResult:
    name: str
    line: int
    problems: tuple[str, ...] = ()
    fired: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class FileResult:
    path: str
    cases: tuple[CaseResult, ...] = ()
    error: str | None = None
    rule_files: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.cases)


def run_test_file(path: str | Path) -> FileResult:
    """Run every case of one rule-test file; a malformed file is an error, not a crash."""
    p = Path(path)
    try:
        doc = parse_rule_yaml(read_yaml_text(p), str(p))
        top = _mapping(doc, str(p), _FILE_KEYS)
        files_node = top.get("rule_files")
        if files_node is None or not isinstance(files_node.value, list) or not files_node.value:
            raise RuleError("'rule_files' must be a non-empty list", path=str(p), line=doc.line)
        rule_files = [str((p.parent / str(f.value)).resolve()) for f in files_node.value]
        rules = load_rules(rule_files)
        cases_node = top.get("tests")
        if cases_node is None or not isinstance(cases_node.value, list) or not cases_node.value:
            raise RuleError("'tests' must be a non-empty list", path=str(p), line=doc.line)
        results = tuple(_run_case(c, rules, str(p)) for c in cases_node.value)
    except (RuleError, LimitError, OSError, UnicodeDecodeError) as e:
        return FileResult(str(p), error=str(e))
    return FileResult(str(p), results, rule_files=tuple(rule_files))


def _run_case(node: YamlNode, rules: RuleSet, path: str) -> CaseResult:
    m = _mapping(node, path, _CASE_KEYS)
    name = str(m["name"].value) if "name" in m else f"case at line {node.line}"

    def err(msg: str, at: YamlNode | None = None) -> RuleError:
        return RuleError(f"test {name!r}: {msg}", path=path, line=(at or node).line)

    facts = _trace_facts(m, path, err) if "trace" in m else _facts(m, err)
    if "params" in m:
        overrides = m["params"].plain()
        if not isinstance(overrides, dict):
            raise err("'params' must be a mapping", m["params"])
        unknown = set(overrides) - {k for r in rules.rules for k in r.params}
        if unknown:
            raise err(f"'params' names unknown parameter {sorted(unknown)[0]!r}", m["params"])
        rules = RuleSet(
            tuple(replace(r, params={**r.params, **overrides}) for r in rules.rules), rules.sources
        )
    held = None
    if "held_s" in m:
        held = m["held_s"].plain()
        if not isinstance(held, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in held.values()
        ):
            raise err("'held_s' must map rule names to seconds", m["held_s"])
    result = evaluate_detailed(rules, facts, held_s=held)
    fired = tuple(r.rule for r in result.recommendations)
    problems = [f"rule {f.rule} failed to evaluate: {f.error}" for f in result.failures]
    known = set(rules.names)
    for key, want in (("expect_fire", True), ("expect_not_fire", False)):
        for n in _names(m.get(key), err):
            if n not in known:
                raise err(f"{key} names unknown rule {n!r}", m[key])
            if (n in fired) != want:
                problems.append(
                    f"expected {n} {'to fire' if want else 'not to fire'}" + _why(n, result)
                )
    if "expect" in m:
        if not isinstance(m["expect"].value, list):
            raise err("'expect' must be a list", m["expect"])
        for e in m["expect"].value:
            problems.extend(_check_expect(e, result, path, err))
    return CaseResult(name, node.line, tuple(dict.fromkeys(problems)), fired)


def _facts(m: Mapping[str, YamlNode], err: Any) -> Facts:
    given = m["facts"].plain() if "facts" in m else {}
    if not isinstance(given, dict):
        raise err("'facts' must be a mapping", m.get("facts"))
    argv: Sequence[str] = ()
    if "engine_cmdline" in m:
        raw = m["engine_cmdline"].value
        if not isinstance(raw, str):
            raise err("'engine_cmdline' must be a string", m["engine_cmdline"])
        argv = shlex.split(raw)
        env = m["engine_env"].plain() if "engine_env" in m else {}
        cfg = _parse_cmdline(argv, env, err, _version(m, err))
        argv = cfg.argv or argv
        given = {**given, "engine": {**engine_facts(cfg), **given.get("engine", {})}}
        if cfg.training is not None:
            stages = given.get("stages") or []
            occupancy = [s.get("occupancy_ratio") for s in stages if isinstance(s, dict)]
            given["training"] = {**training_facts(cfg, occupancy), **given.get("training", {})}
    try:
        facts = facts_from_mapping(given, partial=True, argv=argv)
        # Figures derived from the facts given, as build_facts computes them; given ones win.
        derived = {**derive(dict(facts.data)), **given.get("derived", {})}
        facts = facts_from_mapping({**given, "derived": derived}, partial=True, argv=argv)
    except FactsError as e:
        raise err(str(e), m.get("facts")) from None
    return facts


def _trace_facts(m: Mapping[str, YamlNode], path: str, err: Any) -> Facts:
    """Facts as `analyze` would build them: the detector's diagnosis of a recording."""
    from bubblewatch.detect import diagnose
    from bubblewatch.errors import InputError
    from bubblewatch.rules.facts import build_facts
    from bubblewatch.rules.load_peak import peak_for
    from bubblewatch.sources.load import load_recording

    if "facts" in m:
        raise err("give either 'trace' or 'facts', not both", m["facts"])
    raw = m["trace"].value
    fmt = m["trace_format"].value if "trace_format" in m else "auto"
    if not isinstance(raw, str) or not isinstance(fmt, str):
        raise err("'trace' (and 'trace_format') must be strings", m["trace"])
    try:
        recording = load_recording(Path(path).parent / raw, format=fmt)
    except (InputError, OSError) as e:
        raise err(f"cannot read the trace: {e}", m["trace"]) from None
    topology = recording.topology
    engine = None
    if "engine_cmdline" in m:
        cmd = m["engine_cmdline"].value
        if not isinstance(cmd, str):
            raise err("'engine_cmdline' must be a string", m["engine_cmdline"])
        env = m["engine_env"].plain() if "engine_env" in m else {}
        engine = _parse_cmdline(shlex.split(cmd), env, err, _version(m, err))
    elif topology is not None and topology.argv:
        engine = _parse_cmdline(list(topology.argv), dict(topology.env), err, _version(m, err))
    # A training launch's layout gives the schedule its bubble is judged against, as in analyze.
    lay = None if engine is None else engine.training
    schedule = None if lay is None else lay.pipeline_schedule()
    diagnosis = diagnose(recording, topology, schedule=schedule)
    peak = peak_for(diagnosis, recording.load)
    return build_facts(diagnosis, engine, topology, gpus=recording.gpus, peak=peak)


def _version(m: Mapping[str, YamlNode], err: Any) -> str | None:
    """The case's `engine_version` (the version whose flag table judges the fixes)."""
    if "engine_version" not in m:
        return None
    v = m["engine_version"].value
    if not isinstance(v, str):
        raise err("'engine_version' must be a string (quote it: \"0.5.11\")", m["engine_version"])
    return v


def _parse_cmdline(argv: Sequence[str], env: Any, err: Any, version: str | None = None) -> Any:
    try:
        from bubblewatch.topology.cmdline import parse_engine_cmdline
    except ImportError:
        raise err("'engine_cmdline' needs bubblewatch.topology.parse_engine_cmdline") from None
    cfg = parse_engine_cmdline(list(argv), dict(env or {}), version=version)
    if cfg is None:
        from bubblewatch.topology.training import LocalFiles, training_from_cmdline

        job = training_from_cmdline(list(argv), dict(env or {}), [], files=LocalFiles())
        if job is None:
            raise err("'engine_cmdline' is not a command line of a known engine or trainer")
        return job.engine_config()
    return cfg


def _why(name: str, result: Evaluation) -> str:
    if name in result.pending:
        return " (condition holds, but not yet for its 'for' duration)"
    if name in result.matched:
        return " (condition holds)"
    return ""


def _check_expect(node: YamlNode, result: Evaluation, path: str, err: Any) -> list[str]:
    e = _mapping(node, path, _EXPECT_KEYS)
    if "rule" not in e:
        raise err("each 'expect' entry needs 'rule'", node)
    rule = str(e["rule"].value)
    rec = next((r for r in result.recommendations if r.rule == rule), None)
    if rec is None:
        return [f"expected {rule} to fire" + _why(rule, result)]
    out: list[str] = []
    rendered = rec.rendered
    checks: list[tuple[str, str | None]] = [
        ("summary_contains", rec.summary),
        ("description_contains", rec.description),
        ("command_contains", rec.command),
        ("diff_contains", rec.diff),
        ("live_contains", None if rendered is None else rendered.live),
        ("caveat_contains", None if rendered is None else rendered.caveat),
        ("note_contains", None if rec.fix is None else rec.fix.note),
    ]
    for key, text in checks:
        for want in _strings(e.get(key)):
            if text is None or want not in text:
                out.append(f"{rule}: {key.removesuffix('_contains')} lacks {want!r}: {text!r}")
    for want in _strings(e.get("command_not_contains")):
        if rec.command is not None and want in rec.command:
            out.append(f"{rule}: command contains {want!r}: {rec.command!r}")
    if "command_valid" in e:
        valid = None if rendered is None else rendered.valid
        if valid is not e["command_valid"].value:
            why = "" if rendered is None else f" ({'; '.join(rendered.problems)})"
            out.append(
                f"{rule}: command valid is {valid}, expected {e['command_valid'].value}{why}"
            )
    if "severity" in e and rec.severity.value != e["severity"].value:
        out.append(f"{rule}: severity {rec.severity.value}, expected {e['severity'].value}")
    out.extend(_gain_problems(rule, rec, e))
    return out


def _gain_problems(rule: str, rec: Recommendation, e: Mapping[str, YamlNode]) -> list[str]:
    factor = None if rec.expected_gain is None else rec.expected_gain.factor
    out = []
    for key, sign in (("gain_factor_min", 1), ("gain_factor_max", -1)):
        if key in e:
            bound = float(e[key].value)
            if factor is None or sign * (factor - bound) < 0:
                out.append(
                    f"{rule}: gain factor {factor} is not {'>=' if sign > 0 else '<='} {bound}"
                )
    return out


def _names(node: YamlNode | None, err: Any) -> list[str]:
    if node is None:
        return []
    v = node.plain()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise err("expected a list of rule names", node)
    return list(v)


def _strings(node: YamlNode | None) -> list[str]:
    if node is None:
        return []
    v = node.plain()
    return [str(x) for x in v] if isinstance(v, list) else [str(v)]


def _mapping(node: YamlNode, path: str, allowed: set[str]) -> dict[str, YamlNode]:
    if not isinstance(node.value, dict):
        raise RuleError("expected a mapping", path=path, line=node.line)
    for k, v in node.value.items():
        if k not in allowed:
            raise RuleError(
                f"unknown key {k!r} (allowed: {', '.join(sorted(allowed))})",
                path=path,
                line=v.line,
                field=k,
            )
    return dict(node.value)
