"""Rule files: find them, parse them, check them against the schema (docs/rules.md).

Every error names the file, the line of the offending YAML node, and the
rule. `check_paths` collects all errors of a set (for `bubblewatch rules
check`); `load_rules` raises the first one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import lark

from bubblewatch.limits import YAML_MAX_BYTES, LimitError, read_capped
from bubblewatch.rules._cache import read_cached, source_digest, write_cached
from bubblewatch.rules.errors import ExprError, RuleError
from bubblewatch.rules.expr import Expr, compile_expr
from bubblewatch.rules.model import RULE_FILE_VERSION, FixSpec, GainSpec, Rule, RuleSet, Severity
from bubblewatch.rules.template import Template, compile_template

if TYPE_CHECKING:  # PyYAML is imported only when a rule file is parsed (a cache miss)
    from bubblewatch.safeyaml import YamlNode

RULE_FILE_GLOBS = ("*.rules.yaml", "*.rules.yml")
# The training frameworks (bubblewatch.topology.training.layout), after the serving engines.
FRAMEWORKS = ("megatron", "nemo", "deepspeed", "torchtitan", "torch")


def known_engines() -> tuple[str, ...]:
    """What a rule's `engine` may name: the serving engines, then FRAMEWORKS."""
    from bubblewatch.engines import names as engine_names  # only when a rule file is checked

    return (*engine_names(), *FRAMEWORKS)


MAX_RULES = 500

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_LIVE = re.compile(r"^[a-z_][a-z0-9_]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")

_FILE_KEYS = {"version", "params", "groups"}
_GROUP_KEYS = {"name", "rules"}
_RULE_KEYS = {
    "name",
    "expr",
    "for",
    "severity",
    "labels",
    "summary",
    "description",
    "engine",
    "fix",
    "expected_gain",
    "rationale",
}
_FIX_KEYS = {"engine", "add_flags", "remove_flags", "set_env", "set_live", "note"}
_GAIN_KEYS = {"metric", "factor", "text"}

T = TypeVar("T")


def shipped_rules_dir() -> Path:
    """The shipped rule set, package data: `shipped/` links to the repository's `rules/`.

    In a checkout the link resolves to `rules/` itself; a built wheel holds the
    files the link points at (`*.rules.yaml`), so there is one copy to edit.
    """
    return (Path(__file__).resolve().parent / "shipped").resolve()


def rule_files(paths: Sequence[str | Path] | None) -> list[Path]:
    """Files named, plus `*.rules.yaml` inside directories named (sorted, not recursive)."""
    if paths is None:
        paths = [shipped_rules_dir()]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted({f for g in RULE_FILE_GLOBS for f in p.glob(g)})
            if not found:
                raise RuleError("directory has no *.rules.yaml files", path=str(p))
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise RuleError("no such file or directory", path=str(p))
    return out


def load_rules(paths: Sequence[str | Path] | None = None) -> RuleSet:
    """Load and check a rule set (None: the shipped set); RuleError on the first problem.

    A set that loaded without error is kept in the user's cache (rules._cache),
    keyed by its files' text and the checker's source; a hit skips the checks.
    """
    key = _cache_key(paths)
    if key is not None:
        slot = "rules-" + source_digest(*(str(p).encode() for p in paths or ()))[:16]
        hit = read_cached(slot, key, RuleSet)
        if hit is not None:
            return hit
    ruleset, errors = check_paths(paths)
    if errors:
        first = errors[0]
        if len(errors) > 1:
            raise RuleError(
                f"{first.reason} (and {len(errors) - 1} more: run `bubblewatch rules check`)",
                path=first.path,
                line=first.line,
                field=first.field,
            )
        raise first
    if key is not None:
        write_cached(slot, key, ruleset)
    return ruleset


def _cache_key(paths: Sequence[str | Path] | None) -> str | None:
    """The digest of the set's files and of the code that checks them; None if unreadable."""
    try:
        files = rule_files(paths)
        texts = [str(f).encode() + b"\0" + _rule_text(f).encode() for f in files]
    except (RuleError, LimitError, OSError, UnicodeDecodeError):
        return None  # check_paths reports it
    return source_digest(*_checker_sources(), *texts)


def _checker_sources() -> list[bytes]:
    """The source of what decides whether a rule loads and what it compiles to."""
    here = Path(__file__).resolve().parent
    files = [
        *sorted(here.glob("*.py")),
        here.parent / "detect" / "types.py",
        here.parent / "safeyaml.py",
        here.parent / "limits.py",
    ]
    out = [lark.__version__.encode()]
    for f in files:
        try:
            out.append(f.read_bytes())
        except OSError:
            out.append(b"")
    return out


def check_paths(paths: Sequence[str | Path] | None = None) -> tuple[RuleSet, list[RuleError]]:
    """Every rule that loads, and every error found, across the files."""
    try:
        files = rule_files(paths)
    except RuleError as e:
        return RuleSet(()), [e]
    rules: list[Rule] = []
    errors: list[RuleError] = []
    for f in files:
        try:
            text = _rule_text(f)  # at most 1 MiB read, whatever the file's size
        except (OSError, UnicodeDecodeError) as e:
            errors.append(RuleError(f"cannot read: {e}", path=str(f)))
            continue
        except LimitError as e:
            errors.append(RuleError(e.reason, path=str(f)))
            continue
        rules.extend(parse_rule_file(text, str(f), errors))
    seen: dict[str, Rule] = {}
    for r in rules:
        if r.name in seen:
            errors.append(
                RuleError(
                    f"duplicate rule name (first defined at {seen[r.name].where})",
                    path=r.path,
                    line=r.line,
                    rule=r.name,
                )
            )
        seen.setdefault(r.name, r)
    if len(rules) > MAX_RULES:
        errors.append(RuleError(f"more than {MAX_RULES} rules in the set"))
    return RuleSet(tuple(rules), tuple(str(f) for f in files)), errors


def _rule_text(path: str | Path) -> str:
    """A rule file's text as `safeyaml.read_yaml_text` reads it, without importing PyYAML."""
    return read_capped(path, YAML_MAX_BYTES).decode("utf-8")


def parse_rule_yaml(text: str, path: str) -> YamlNode:
    """A rule file or rule-test file as YAML nodes: no anchors, no aliases, not empty."""
    from bubblewatch.safeyaml import parse_yaml

    doc = parse_yaml(text, path, RuleError, aliases=False)
    if doc is None:
        raise RuleError("file is empty", path=path)
    return doc


def parse_rule_file(text: str, path: str, errors: list[RuleError]) -> list[Rule]:
    """Rules of one file; problems are appended to `errors` (one per bad rule, at most)."""
    try:
        doc = parse_rule_yaml(text, path)
        top = _mapping(doc, path, "file", _FILE_KEYS)
        version = top.get("version")
        if version is None or version.value != RULE_FILE_VERSION:
            raise RuleError(
                f"'version: {RULE_FILE_VERSION}' is required",
                path=path,
                line=(version or doc).line,
                field="version",
            )
        params = _params(top.get("params"), path)
        groups = top.get("groups")
        if groups is None or not isinstance(groups.value, list):
            raise RuleError("'groups' must be a list", path=path, line=doc.line, field="groups")
    except RuleError as e:
        errors.append(e)
        return []
    out: list[Rule] = []
    for g in groups.value:
        try:
            gm = _mapping(g, path, "group", _GROUP_KEYS)
            gname = _str(gm, "name", path, g.line)
            rules_node = gm.get("rules")
            if rules_node is None or not isinstance(rules_node.value, list):
                raise RuleError("group needs a 'rules' list", path=path, line=g.line, field="rules")
        except RuleError as e:
            errors.append(e)
            continue
        for rn in rules_node.value:
            try:
                out.append(_rule(rn, gname, path, params))
            except RuleError as e:
                errors.append(e)
    return out


def _rule(node: YamlNode, group: str, path: str, params: Mapping[str, Any]) -> Rule:
    name_node = node.value.get("name") if isinstance(node.value, dict) else None
    name = name_node.value if name_node is not None and isinstance(name_node.value, str) else None

    def fail(msg: str, at: YamlNode | None = None, field: str | None = None) -> RuleError:
        return RuleError(msg, path=path, line=(at or node).line, field=field, rule=name)

    m = _mapping(node, path, "rule", _RULE_KEYS, rule=name)
    if name is None or not _NAME.match(name):
        raise fail(
            "'name' must be an identifier (letters, digits, _; 64 at most)", name_node, "name"
        )

    def compiled(key: str, make: Callable[[str], T], required: bool = True) -> T | None:
        n = m.get(key)
        if n is None:
            if required:
                raise fail(f"'{key}' is required", field=key)
            return None
        if not isinstance(n.value, str):
            raise fail(f"'{key}' must be a string", n, key)
        try:
            return make(n.value)
        except ExprError as e:
            raise fail(str(e), n, key) from None

    expr = compiled("expr", lambda s: compile_expr(s, params=params))
    summary = compiled("summary", lambda s: compile_template(s, params=params))
    assert expr is not None and summary is not None
    description = compiled("description", lambda s: compile_template(s, params=params), False)
    sev_node = m.get("severity")
    try:
        severity = Severity(sev_node.value if sev_node else "warning")
    except ValueError:
        raise fail("'severity' must be info, warning or critical", sev_node, "severity") from None
    for_s = 0.0
    if "for" in m:
        for_s = _duration(m["for"], fail)
    engines: tuple[str, ...] = ()
    if "engine" in m:
        e = m["engine"].value
        engines = (
            (e,) if isinstance(e, str) else tuple(x.value for x in e) if isinstance(e, list) else ()
        )
        known = known_engines()
        if not engines or any(x not in known for x in engines):
            raise fail(
                f"'engine' must be one of {', '.join(known)} or a list of them",
                m["engine"],
                "engine",
            )
    labels: dict[str, str] = {}
    if "labels" in m:
        lm = _mapping(m["labels"], path, "labels", None, rule=name)
        for k, v in lm.items():
            if not _LABEL.match(k) or not isinstance(v.value, (str, int, float, bool)):
                raise fail(f"label {k!r} must be an identifier with a scalar value", v, "labels")
            labels[k] = str(v.value)
    rationale = ""
    if "rationale" in m:
        if not isinstance(m["rationale"].value, str):
            raise fail("'rationale' must be a string", m["rationale"], "rationale")
        rationale = m["rationale"].value
    fix = _fix(m["fix"], fail, path, name, params) if "fix" in m else None
    gain = _gain(m["expected_gain"], fail, path, name, params) if "expected_gain" in m else None
    return Rule(
        name=name,
        group=group,
        path=path,
        line=node.line,
        expr=expr,
        severity=severity,
        summary=summary,
        for_s=for_s,
        engines=engines,
        labels=labels,
        description=description,
        fix=fix,
        gain=gain,
        rationale=rationale,
        params=params,
    )


def _fix(
    node: YamlNode, fail: Callable[..., RuleError], path: str, name: str, params: Any
) -> FixSpec:
    m = _mapping(node, path, "fix", _FIX_KEYS, rule=name)

    def tmpl(n: YamlNode, field: str) -> Template:
        if not isinstance(n.value, (str, int, float)) or isinstance(n.value, bool):
            raise fail(f"'{field}' values must be strings or numbers", n, field)
        try:
            return compile_template(str(n.value), params=params)
        except ExprError as e:
            raise fail(str(e), n, field) from None

    engine = None
    if "engine" in m:
        engine = m["engine"].value
        known = known_engines()
        if engine not in known:
            raise fail(f"fix 'engine' must be one of {', '.join(known)}", m["engine"], "fix.engine")
    add: list[tuple[str, Template | None]] = []
    if "add_flags" in m:
        for flag, v in _mapping(m["add_flags"], path, "add_flags", None, rule=name).items():
            if not _FLAG.match(flag):
                raise fail(f"{flag!r} is not a command-line flag", v, "fix.add_flags")
            add.append((flag, None if v.value is True else tmpl(v, "fix.add_flags")))
    remove: list[str] = []
    if "remove_flags" in m:
        rm = m["remove_flags"]
        if not isinstance(rm.value, list):
            raise fail("'remove_flags' must be a list of flags", rm, "fix.remove_flags")
        for f in rm.value:
            # "--flag" or "--flag=value": remove the flag only where it has that value.
            head = f.value.partition("=")[0] if isinstance(f.value, str) else f.value
            if not isinstance(head, str) or not _FLAG.match(head):
                raise fail(f"{f.value!r} is not a command-line flag", f, "fix.remove_flags")
            remove.append(f.value)
    env: list[tuple[str, Template]] = []
    if "set_env" in m:
        for var, v in _mapping(m["set_env"], path, "set_env", None, rule=name).items():
            if not _ENV.match(var):
                raise fail(f"{var!r} is not an environment variable name", v, "fix.set_env")
            env.append((var, tmpl(v, "fix.set_env")))
    live: list[tuple[str, Template]] = []
    if "set_live" in m:
        for key, v in _mapping(m["set_live"], path, "set_live", None, rule=name).items():
            if not _LIVE.match(key):
                raise fail(f"{key!r} is not a server setting name", v, "fix.set_live")
            live.append((key, tmpl(v, "fix.set_live")))
    note = tmpl(m["note"], "fix.note") if "note" in m else None
    if (add or remove) and engine is None:
        raise fail("a fix that changes flags must name its 'engine'", node, "fix.engine")
    if not (add or remove or env or note):
        raise fail("'fix' is empty: give add_flags, remove_flags, set_env or note", node, "fix")
    return FixSpec(engine, tuple(add), tuple(remove), tuple(env), note, tuple(live))


def _gain(
    node: YamlNode, fail: Callable[..., RuleError], path: str, name: str, params: Any
) -> GainSpec:
    m = _mapping(node, path, "expected_gain", _GAIN_KEYS, rule=name)
    metric = m.get("metric")
    if metric is None or not isinstance(metric.value, str):
        raise fail(
            "'expected_gain.metric' is required (e.g. throughput)", node, "expected_gain.metric"
        )
    factor: Expr | None = None
    text: Template | None = None
    try:
        if "factor" in m:
            f = m["factor"].value
            factor = compile_expr(str(f) if isinstance(f, (int, float)) else f, params=params)
        if "text" in m:
            text = compile_template(m["text"].value, params=params)
    except ExprError as e:
        raise fail(str(e), node, "expected_gain") from None
    if factor is None and text is None:
        raise fail("'expected_gain' needs 'factor' or 'text'", node, "expected_gain")
    return GainSpec(metric.value, factor, text)


def _params(node: YamlNode | None, path: str) -> dict[str, Any]:
    if node is None:
        return {}
    out: dict[str, Any] = {}
    for k, v in _mapping(node, path, "params", None).items():
        if not _NAME.match(k):
            raise RuleError(f"parameter name {k!r} must be an identifier", path=path, line=v.line)
        val = v.plain()
        ok_scalar = isinstance(val, (str, int, float, bool))
        ok_list = isinstance(val, list) and all(isinstance(x, (str, int, float, bool)) for x in val)
        if not (ok_scalar or ok_list):
            raise RuleError(
                f"parameter {k!r} must be a scalar or a list of scalars",
                path=path,
                line=v.line,
                field=f"params.{k}",
            )
        out[k] = val
    return out


def _duration(node: YamlNode, fail: Callable[..., RuleError]) -> float:
    v = node.value
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
        return float(v)
    m = _DURATION.match(v) if isinstance(v, str) and v else None
    if m is None or not any(m.groups()):
        raise fail(f"'for' must be a duration like 30s, 5m or 1h30m, got {v!r}", node, "for")
    h, mi, s = m.groups()
    return int(h or 0) * 3600.0 + int(mi or 0) * 60.0 + float(s or 0)


def _mapping(
    node: YamlNode, path: str, what: str, allowed: set[str] | None, *, rule: str | None = None
) -> dict[str, YamlNode]:
    if not isinstance(node.value, dict):
        raise RuleError(f"{what} must be a mapping", path=path, line=node.line, rule=rule)
    if allowed is not None:
        for k, v in node.value.items():
            if k not in allowed:
                raise RuleError(
                    f"unknown key {k!r} in {what} (allowed: {', '.join(sorted(allowed))})",
                    path=path,
                    line=v.line,
                    field=k,
                    rule=rule,
                )
    return dict(node.value)


def _str(m: Mapping[str, YamlNode], key: str, path: str, line: int) -> str:
    n = m.get(key)
    if n is None or not isinstance(n.value, str) or not n.value:
        raise RuleError(f"'{key}' must be a non-empty string", path=path, line=line, field=key)
    return n.value
