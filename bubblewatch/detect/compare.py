"""Before and after: two Diagnoses side by side, and whether a fix did what was predicted.

Pure: inputs are Diagnoses, their recordings' meta (for `tokens_per_s`) and the
recommendations that fired on BEFORE. The criterion (docs/inputs.md, "Before
and after") is:

* The prediction comes from the recommendations' expected gains when they give
  a number (throughput factor), plus a default per BEFORE verdict: a
  serialized pipeline under load should become healthy with concurrency up to
  pp_size; launch-bound, imbalanced or straggler should become healthy. A
  serialized pipeline that is load-limited has no configuration fix: nothing
  is predicted.
* verdict check: AFTER's verdict is the predicted one.
* concurrency check: concurrency rose by at least half the predicted gain,
  C_after - C_before >= 0.5 * (C_predicted - C_before).
* throughput check (when both sides know tokens/s): with a predicted factor f,
  T_after / T_before >= 1 + 0.5 * (f - 1); without one, at least +5 %.
* borne out: every check that could be made passed; None when nothing was
  predicted or nothing could be checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bubblewatch.detect.types import Diagnosis, Verdict

# Share of the predicted gain that must show for a fix to count as borne out.
GAIN_SHARE = 0.5
# Without a predicted factor, a throughput gain below this is noise.
MIN_THROUGHPUT_GAIN = 1.05
_FIXABLE = {
    Verdict.LAUNCH_BOUND: "healthy",
    Verdict.IMBALANCED: "healthy",
    Verdict.STRAGGLER: "healthy",
}


@dataclass(frozen=True)
class Side:
    """One input's figures, None where the input cannot tell."""

    label: str
    verdict: str
    confidence: float
    load_limited: bool | None
    pp_size: int | None
    concurrency: float | None
    bubble_ratio: float | None
    occupancy: tuple[float | None, ...]
    mean_power_w: float | None
    bubble_energy_j: float | None
    window_s: float
    tokens_per_s: float | None
    n_gpus: int

    @property
    def bubble_power_w(self) -> float | None:
        if self.bubble_energy_j is None or self.window_s <= 0:
            return None
        return self.bubble_energy_j / self.window_s

    @property
    def joules_per_token(self) -> float | None:
        if self.mean_power_w is None or not self.tokens_per_s:
            return None
        return self.mean_power_w * self.n_gpus / self.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "verdict": self.verdict,
            "confidence": _r(self.confidence),
            "load_limited": self.load_limited,
            "pp_size": self.pp_size,
            "concurrency": _r(self.concurrency),
            "bubble_ratio": _r(self.bubble_ratio),
            "occupancy": [_r(x) for x in self.occupancy],
            "mean_power_w": _r(self.mean_power_w, 1),
            "bubble_energy_j": _r(self.bubble_energy_j, 1),
            "bubble_power_w": _r(self.bubble_power_w, 1),
            "window_s": _r(self.window_s, 1),
            "tokens_per_s": _r(self.tokens_per_s, 2),
            "joules_per_token": _r(self.joules_per_token, 3),
            "n_gpus": self.n_gpus,
        }


@dataclass(frozen=True)
class Prediction:
    """What the fix should achieve: a verdict, a concurrency, a throughput factor."""

    source: str
    verdict: str | None = None
    concurrency: float | None = None
    throughput_factor: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "verdict": self.verdict,
            "concurrency": _r(self.concurrency),
            "throughput_factor": _r(self.throughput_factor, 2),
        }


@dataclass(frozen=True)
class Check:
    """One test of the prediction; `passed` None when it could not be made."""

    name: str
    passed: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Comparison:
    """BEFORE and AFTER side by side, the changes, and the verdict on the fix."""

    before: Side
    after: Side
    prediction: Prediction | None
    checks: tuple[Check, ...]
    borne_out: bool | None
    summary: str
    changes: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # the two sides are not like for like

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "warnings": list(self.warnings),
            "changes": {k: dict(v) for k, v in self.changes.items()},
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "borne_out": self.borne_out,
            "summary": self.summary,
        }


def _r(v: float | None, nd: int = 3) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return round(float(v), nd)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def side_from(diagnosis: Diagnosis, meta: Mapping[str, Any], label: str, n_gpus: int) -> Side:
    """The figures of one input: from its diagnosis and its recording's meta."""
    ev = diagnosis.evidence
    powers = [p for s in diagnosis.stages if (p := _num(s.power_w)) is not None]
    pp = ev.get("pp_size")
    return Side(
        label=label,
        verdict=diagnosis.verdict.value,
        confidence=diagnosis.confidence,
        load_limited=diagnosis.load_limited,
        pp_size=pp if isinstance(pp, int) and not isinstance(pp, bool) else len(diagnosis.stages),
        concurrency=_num(ev.get("concurrency")),
        bubble_ratio=_num(ev.get("bubble_ratio")),
        occupancy=tuple(_num(s.occupancy_ratio) for s in diagnosis.stages),
        mean_power_w=sum(powers) / len(powers) if powers else None,
        bubble_energy_j=_num(ev.get("bubble_energy_j")),
        window_s=diagnosis.window_s,
        tokens_per_s=_num(meta.get("tokens_per_s")),
        n_gpus=n_gpus,
    )


def predict(before: Side, recommendations: Sequence[Mapping[str, Any]] = ()) -> Prediction | None:
    """The expected outcome of fixing BEFORE: recommendations' gains, else the verdict default."""
    factor: float | None = None
    metric = "throughput"
    source = "default"
    for rec in recommendations:
        gain = rec.get("expected_gain")
        if isinstance(gain, Mapping) and gain.get("metric") in ("throughput", "concurrency"):
            f = _num(gain.get("factor"))
            if f is not None and f > 1.0:
                factor, metric, source = f, str(gain["metric"]), f"rule {rec.get('rule')}"
                break
    # A concurrency gain predicts stage utilisation, not tokens/s: how throughput
    # follows depends on how stage time scales with micro-batch size.
    tput = factor if metric == "throughput" else None
    verdict = Verdict(before.verdict)
    if verdict is Verdict.SERIALIZED and before.load_limited is not True:
        conc = float(before.pp_size) if before.pp_size else None
        if factor is not None and before.concurrency:
            conc = min(conc or math.inf, before.concurrency * factor)
        return Prediction(source, "healthy", conc, tput)
    if verdict in _FIXABLE:
        return Prediction(source, _FIXABLE[verdict], None, tput)
    if tput is not None:
        return Prediction(source, None, None, tput)
    return None


def _change(before: float | None, after: float | None) -> dict[str, float | None]:
    delta = None if before is None or after is None else after - before
    ratio = None if before is None or after is None or before == 0 else after / before
    return {"before": _r(before), "after": _r(after), "delta": _r(delta), "ratio": _r(ratio)}


def _checks(b: Side, a: Side, p: Prediction) -> list[Check]:
    checks: list[Check] = []
    if p.verdict is not None:
        ok = a.verdict == p.verdict
        checks.append(Check("verdict", ok, f"{b.verdict} -> {a.verdict} (expected {p.verdict})"))
    if p.concurrency is not None and b.concurrency is not None and p.concurrency > b.concurrency:
        need = b.concurrency + GAIN_SHARE * (p.concurrency - b.concurrency)
        if a.concurrency is None:
            checks.append(Check("concurrency", None, "AFTER's concurrency is not measurable"))
        else:
            checks.append(
                Check(
                    "concurrency",
                    a.concurrency >= need,
                    f"{b.concurrency:.2f} -> {a.concurrency:.2f} (predicted {p.concurrency:.2f};"
                    f" at least {need:.2f} needed)",
                )
            )
    if b.tokens_per_s and a.tokens_per_s is not None:
        gain = a.tokens_per_s / b.tokens_per_s
        if p.throughput_factor is not None:
            need_f = 1.0 + GAIN_SHARE * (p.throughput_factor - 1.0)
            what = f"predicted x{p.throughput_factor:.2f}; at least x{need_f:.2f} needed"
        else:
            need_f = MIN_THROUGHPUT_GAIN
            what = f"no factor predicted; at least x{need_f:.2f} needed"
        checks.append(
            Check(
                "throughput",
                gain >= need_f,
                f"{b.tokens_per_s:.1f} -> {a.tokens_per_s:.1f} tok/s (x{gain:.2f}; {what})",
            )
        )
    return checks


def compare(
    before: Diagnosis,
    after: Diagnosis,
    *,
    before_meta: Mapping[str, Any] | None = None,
    after_meta: Mapping[str, Any] | None = None,
    before_gpus: int = 0,
    after_gpus: int = 0,
    recommendations: Sequence[Mapping[str, Any]] = (),
    labels: tuple[str, str] = ("before", "after"),
) -> Comparison:
    """Compare two diagnoses; `recommendations` (as dicts) are those that fired on BEFORE."""
    b = side_from(before, before_meta or {}, labels[0], before_gpus or _gpus(before))
    a = side_from(after, after_meta or {}, labels[1], after_gpus or _gpus(after))
    changes = {
        "concurrency": _change(b.concurrency, a.concurrency),
        "bubble_ratio": _change(b.bubble_ratio, a.bubble_ratio),
        "mean_power_w": _change(b.mean_power_w, a.mean_power_w),
        "bubble_energy_j": _change(b.bubble_energy_j, a.bubble_energy_j),
        "bubble_power_w": _change(b.bubble_power_w, a.bubble_power_w),
        "tokens_per_s": _change(b.tokens_per_s, a.tokens_per_s),
        "joules_per_token": _change(b.joules_per_token, a.joules_per_token),
    }
    p = predict(b, recommendations)
    checks = tuple(_checks(b, a, p)) if p is not None else ()
    judged = [c.passed for c in checks if c.passed is not None]
    borne_out = None if not judged else all(judged)
    summary = _summary(b, a, p, borne_out, checks)
    return Comparison(b, a, p, checks, borne_out, summary, changes, _unlike(b, a))


def _unlike(b: Side, a: Side) -> tuple[str, ...]:
    """Why BEFORE and AFTER are not like for like: a PP8 and a PP4 gave "x3.44" silently."""
    if (b.pp_size, b.n_gpus) == (a.pp_size, a.n_gpus):
        return ()
    return (
        f"BEFORE is PP {b.pp_size} on {b.n_gpus} GPU(s), AFTER PP {a.pp_size} on "
        f"{a.n_gpus} GPU(s): the changes compare different pipelines, not a fix of one",
    )


def _gpus(d: Diagnosis) -> int:
    return sum(len(s.gpus) for s in d.stages)


def _summary(
    b: Side, a: Side, p: Prediction | None, borne_out: bool | None, checks: Sequence[Check]
) -> str:
    parts = [f"{b.verdict} -> {a.verdict}"]
    if b.concurrency is not None and a.concurrency is not None:
        parts.append(f"concurrency {b.concurrency:.2f} -> {a.concurrency:.2f}")
    if b.tokens_per_s and a.tokens_per_s is not None:
        parts.append(
            f"throughput {b.tokens_per_s:.1f} -> {a.tokens_per_s:.1f} tok/s "
            f"(x{a.tokens_per_s / b.tokens_per_s:.2f})"
        )
    head = ", ".join(parts)
    if p is None:
        return f"{head}. Nothing was predicted for a {b.verdict} pipeline: no verdict on a fix."
    if borne_out is None:
        return f"{head}. The prediction could not be checked."
    if borne_out:
        return f"{head}. The recommendation was borne out."
    failed = ", ".join(c.name for c in checks if c.passed is False)
    return f"{head}. The recommendation was NOT borne out ({failed} fell short)."
