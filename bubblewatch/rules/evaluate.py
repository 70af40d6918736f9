"""Rules applied to facts: which fire, for how long they have held, and what they recommend.

`for`: a rule fires only once its condition has held for its `for` duration.
The daemon tracks that per rule and passes `held_s`. One-shot analysis of a
recording passes no `held_s`: the diagnosis already covers the whole window,
which is all the evidence there is, so `for` counts as met and the window's
length is reported as the time held.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bubblewatch.detect.types import Diagnosis
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import LoadSeries
from bubblewatch.model.topology import Topology
from bubblewatch.rules.errors import EvalError
from bubblewatch.rules.expr import to_activation
from bubblewatch.rules.facts import Facts, build_facts
from bubblewatch.rules.load_peak import DEFAULT_HORIZON_S, peak_for
from bubblewatch.rules.model import Rule, RuleSet, Severity
from bubblewatch.rules.render import Fix, RenderedFix, Target, render_fix
from bubblewatch.topology.engine_config import EngineConfig

if TYPE_CHECKING:  # the live-state reader (and its HTTP client) is not needed here
    from bubblewatch.sources.engine_state import LiveState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpectedGain:
    metric: str
    factor: float | None = None
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "factor": None if self.factor is None else round(self.factor, 2),
            "text": self.text,
        }


@dataclass(frozen=True)
class Recommendation:
    """One fired rule, its texts rendered against the facts, and the fix applied to argv."""

    rule: str
    severity: Severity
    summary: str
    description: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    fix: Fix | None = None
    expected_gain: ExpectedGain | None = None
    rendered: RenderedFix | None = None
    group: str = ""
    held_s: float = 0.0
    base_argv: tuple[str, ...] = field(default=(), repr=False)  # redacted argv the fix applies to
    target: Target | None = field(default=None, repr=False)  # engine version the fix is for

    @property
    def command(self) -> str | None:
        return None if self.rendered is None else self.rendered.command

    @property
    def diff(self) -> str | None:
        return None if self.rendered is None else self.rendered.diff

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "summary": self.summary,
            "description": self.description,
            "labels": dict(self.labels),
            "fix": None if self.fix is None else self.fix.to_dict(),
            "expected_gain": None if self.expected_gain is None else self.expected_gain.to_dict(),
            "command": self.command,
            "diff": self.diff,
            "command_valid": None if self.rendered is None else self.rendered.valid,
            "command_problems": [] if self.rendered is None else list(self.rendered.problems),
            "caveat": None if self.rendered is None else self.rendered.caveat,
            "live": None if self.rendered is None else self.rendered.live,
            "held_s": round(self.held_s, 3),
        }


@dataclass(frozen=True)
class RuleFailure:
    """A rule whose expression or templates failed on these facts (it does not fire)."""

    rule: str
    where: str
    error: str


@dataclass(frozen=True)
class Evaluation:
    """Everything one round found: fired, pending (`for` not yet reached), failed."""

    recommendations: tuple[Recommendation, ...]
    pending: tuple[str, ...] = ()
    failures: tuple[RuleFailure, ...] = ()
    matched: tuple[str, ...] = ()  # condition true, before `for`


def evaluate(
    rules: RuleSet, facts: Facts, *, held_s: Mapping[str, float] | None = None
) -> list[Recommendation]:
    """Recommendations of the rules that fire, most severe first (file order within)."""
    result = evaluate_detailed(rules, facts, held_s=held_s)
    for f in result.failures:
        log.warning("rule %s (%s) could not be evaluated: %s", f.rule, f.where, f.error)
    return list(result.recommendations)


def evaluate_detailed(
    rules: RuleSet, facts: Facts, *, held_s: Mapping[str, float] | None = None
) -> Evaluation:
    """Like `evaluate`, also saying which rules are pending or failed."""
    data = dict(facts.data)
    if held_s is not None:
        data["held_s"] = dict(held_s)
    base = to_activation(data)
    engine = facts.data["engine"]
    argv = facts.argv
    target = target_of(engine)
    recs: list[Recommendation] = []
    pending: list[str] = []
    matched: list[str] = []
    failures: list[RuleFailure] = []
    params_cache: dict[int, dict[str, Any]] = {}
    for rule in rules.rules:
        if rule.engines and engine.get("name") not in rule.engines:
            continue
        key = id(rule.params)
        if key not in params_cache:
            params_cache[key] = {**base, **to_activation({"params": dict(rule.params)})}
        act = params_cache[key]
        try:
            fired = rule.expr.evaluate(act)
            if not isinstance(fired, bool):
                raise EvalError(f"expression gave {type(fired).__name__}, not a boolean")
            if not fired:
                continue
            matched.append(rule.name)
            held = facts.window_s if held_s is None else float(held_s.get(rule.name, 0.0))
            if held_s is not None and held < rule.for_s:
                pending.append(rule.name)
                continue
            recs.append(_recommend(rule, act, argv, held, target))
        except EvalError as e:
            failures.append(RuleFailure(rule.name, rule.where, str(e)))
    recs.sort(key=lambda r: -r.severity.rank)
    return Evaluation(tuple(recs), tuple(pending), tuple(failures), tuple(matched))


def target_of(engine: Mapping[str, Any]) -> Target:
    """The engine a fix is rendered for, from the engine facts: name, flag table, server."""
    name = engine.get("name")
    table = None
    if name:  # the flag tables are imported only for a known engine
        from bubblewatch.engines.flagtable import table_for

        table = table_for(name, engine.get("version"))
    return Target(
        engine=name,
        table=table,
        base_url=engine.get("base_url"),
        live_update=bool(engine.get("live_update")),
    )


def _recommend(
    rule: Rule, act: Mapping[str, Any], argv: Sequence[str], held: float, target: Target
) -> Recommendation:
    fix: Fix | None = None
    rendered: RenderedFix | None = None
    if rule.fix is not None:
        spec = rule.fix
        fix = Fix(
            engine=spec.engine,
            add_flags=tuple((k, None if t is None else t.render(act)) for k, t in spec.add_flags),
            remove_flags=spec.remove_flags,
            set_env=tuple((k, t.render(act)) for k, t in spec.set_env),
            note=None if spec.note is None else spec.note.render(act),
            set_live=tuple((k, t.render(act)) for k, t in spec.set_live),
        )
        if argv and fix.changes_command:
            rendered = render_fix(argv, fix, target)
    gain: ExpectedGain | None = None
    if rule.gain is not None:
        factor = None
        if rule.gain.factor is not None:
            try:
                v = rule.gain.factor.evaluate(act)
            except EvalError:
                v = None  # a gain that cannot be estimated is unknown, not a failed rule
            factor = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        text = None if rule.gain.text is None else rule.gain.text.render(act)
        gain = ExpectedGain(rule.gain.metric, factor, text)
    return Recommendation(
        rule=rule.name,
        severity=rule.severity,
        summary=rule.summary.render(act),
        description=None if rule.description is None else rule.description.render(act),
        labels=dict(rule.labels),
        fix=fix,
        expected_gain=gain,
        rendered=rendered,
        group=rule.group,
        held_s=held,
        base_argv=tuple(argv) if rendered is not None else (),
        target=target,
    )


def combined_fix(recs: Sequence[Recommendation]) -> RenderedFix | None:
    """The command-line fixes that go together, applied at once; None when fewer than two.

    Taken in order (most severe first); a fix that conflicts with those already
    taken (it adds or changes a flag another removes, or sets one differently,
    like switching to tensor parallelism) is left out.
    """
    with_cmd = [r for r in recs if r.rendered is not None and r.fix is not None]
    if not with_cmd:
        return None
    base = with_cmd[0].base_argv
    engine = with_cmd[0].fix.engine if with_cmd[0].fix else None
    add: dict[str, str | None] = {}
    remove: list[str] = []
    env: dict[str, str] = {}
    live: dict[str, str] = {}
    taken = 0
    for r in with_cmd:
        assert r.fix is not None
        if r.base_argv != base or r.fix.engine != engine or _conflicts(r.fix, add, remove, env):
            continue
        taken += 1
        add.update(r.fix.add_flags)
        remove.extend(f for f in r.fix.remove_flags if f not in remove)
        env.update(r.fix.set_env)
        live.update(r.fix.set_live)
    if taken < 2:
        return None
    fix = Fix(
        engine, tuple(add.items()), tuple(remove), tuple(env.items()), set_live=tuple(live.items())
    )
    return render_fix(base, fix, with_cmd[0].target)


def _conflicts(
    fix: Fix, add: Mapping[str, str | None], remove: Sequence[str], env: Mapping[str, str]
) -> bool:
    removed = {f.partition("=")[0] for f in remove}
    new_removed = {f.partition("=")[0] for f in fix.remove_flags}
    if any(k in add and add[k] != v for k, v in fix.add_flags):
        return True
    if any(k in removed for k, _ in fix.add_flags) or any(k in add for k in new_removed):
        return True
    return any(k in env and env[k] != v for k, v in fix.set_env)


def recommend(
    diagnosis: Diagnosis,
    engine: EngineConfig | None,
    topology: Topology | None,
    *,
    rules: RuleSet | None = None,
    gpus: Sequence[GpuInfo] = (),
    held_s: Mapping[str, float] | None = None,
    live: LiveState | None = None,
    load: LoadSeries | None = None,
    peak_horizon_s: float = DEFAULT_HORIZON_S,
) -> list[Recommendation]:
    """One call for the report: facts from the inputs, the shipped rules unless given.

    `live`: the engine's settings read back from it, joined over its command line's.
    `load` is the recording's load history: limits are sized for its peak over the
    last `peak_horizon_s`.
    """
    from bubblewatch.rules.loader import load_rules

    ruleset = load_rules() if rules is None else rules
    peak = None if load is None else peak_for(diagnosis, load, horizon_s=peak_horizon_s)
    facts = build_facts(diagnosis, engine, topology, gpus=gpus, held_s=held_s, live=live, peak=peak)
    return evaluate(ruleset, facts, held_s=held_s)
