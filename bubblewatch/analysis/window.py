"""One window analysed: the diagnosis, the facts, the rules' recommendations.

The CLI commands and the daemon analyse through here. What differs between
them is passed in, not decided here: the daemon's `held_s` (how long each
rule's condition has held), `known_sm_levels` (compute levels earlier windows
of the job resolved), its load peak over a day and its detector options;
the engine's live settings (`live`) where they were read back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bubblewatch.analysis.target import Target
from bubblewatch.detect import DetectOptions, Diagnosis, diagnose
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import LoadSeries, Recording
from bubblewatch.rules import (
    Evaluation,
    Facts,
    Recommendation,
    RuleSet,
    build_facts,
    evaluate_detailed,
    load_rules,
)
from bubblewatch.rules.load_peak import DEFAULT_HORIZON_S, LoadPeak, peak_for

if TYPE_CHECKING:  # the live-state reader and process discovery are not needed here
    from bubblewatch.sources.engine_state import LiveState
    from bubblewatch.topology.single_process import SingleProcessJob

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowAnalysis:
    """A window's diagnosis and what the rules made of it."""

    target: Target
    diagnosis: Diagnosis
    facts: Facts
    evaluation: Evaluation

    @property
    def recommendations(self) -> list[Recommendation]:
        return list(self.evaluation.recommendations)


def diagnose_window(
    window: Recording,
    target: Target,
    *,
    options: DetectOptions | None = None,
    known_sm_levels: Mapping[int, float] | None = None,
) -> Diagnosis:
    """The detector's diagnosis of `window` as the target's job (its schedule, if training)."""
    return diagnose(
        window,
        target.topology,
        options=options,
        schedule=target.schedule,
        known_sm_levels=known_sm_levels,
    )


def judge(
    diagnosis: Diagnosis,
    target: Target,
    *,
    rules: RuleSet | None = None,
    gpus: Sequence[GpuInfo] = (),
    held_s: Mapping[str, float] | None = None,
    live: LiveState | None = None,
    peak: LoadPeak | None = None,
    process: SingleProcessJob | None = None,
) -> WindowAnalysis:
    """The facts of a diagnosis and the rules over them (the shipped rules unless given).

    Without `held_s` a rule's `for` counts as met (a recorded window is past data).
    `peak`: the load peak limits are sized for (see `peak_of`).
    """
    ruleset = load_rules() if rules is None else rules
    facts = build_facts(
        diagnosis,
        target.engine,
        target.topology,
        gpus=gpus,
        held_s=held_s,
        live=live,
        peak=peak,
        process=process,
    )
    evaluation = evaluate_detailed(ruleset, facts, held_s=held_s)
    return WindowAnalysis(target, diagnosis, facts, evaluation)


def peak_of(
    diagnosis: Diagnosis, load: LoadSeries | None, *, horizon_s: float = DEFAULT_HORIZON_S
) -> LoadPeak | None:
    """The load peak of the last `horizon_s` of a window's load history (None: no load)."""
    return None if load is None else peak_for(diagnosis, load, horizon_s=horizon_s)


def analyse_window(
    window: Recording,
    target: Target,
    *,
    rules: RuleSet | None = None,
    gpus: Sequence[GpuInfo] | None = None,
    live: LiveState | None = None,
    options: DetectOptions | None = None,
    peak_horizon_s: float = DEFAULT_HORIZON_S,
) -> WindowAnalysis:
    """Diagnose a recorded window and run the rules over it (see `judge_recorded`)."""
    diagnosis = diagnose_window(window, target, options=options)
    return judge_recorded(
        diagnosis, target, window, rules=rules, gpus=gpus, live=live, peak_horizon_s=peak_horizon_s
    )


def judge_recorded(
    diagnosis: Diagnosis,
    target: Target,
    recording: Recording,
    *,
    rules: RuleSet | None = None,
    gpus: Sequence[GpuInfo] | None = None,
    live: LiveState | None = None,
    peak_horizon_s: float = DEFAULT_HORIZON_S,
) -> WindowAnalysis:
    """The rules over a recorded window's diagnosis, limits sized for its own load peak
    over the last `peak_horizon_s` of the recording.

    `gpus`: the inventory the facts see (default: the recording's). Rules that
    cannot be evaluated are logged and left out.
    """
    out = judge(
        diagnosis,
        target,
        rules=rules,
        gpus=recording.gpus if gpus is None else gpus,
        live=live,
        peak=peak_of(diagnosis, recording.load, horizon_s=peak_horizon_s),
    )
    for f in out.evaluation.failures:
        log.warning("rule %s (%s) could not be evaluated: %s", f.rule, f.where, f.error)
    return out
