"""Before and after an engine restart with new settings: the daemon's own `compare`.

When discovery sees a pipeline's engine come back with different settings
(say `--pp-async-batch-depth 0 -> 8`), `ChangeWatch` keeps the last diagnosis
from before the change, with the recommendations that fired on it; once a
full analysis window after the change exists, it judges the change with
`bubblewatch.detect.compare.compare` (pure), once, and keeps the outcome for
the exporter.

Which diagnosis counts as "before": discovery runs every
`topology.rediscover_interval`, so on a live host the windows analysed just
before a restart is noticed may show the engine down (GPUs idle) or too
little data. The before is the newest recent diagnosis with a verdict other
than `idle` or `insufficient_data`, else the newest of any verdict (which
predicts nothing: the outcome then says so, with `borne_out` unknown).
Likewise after: an engine shows up on the GPUs before it has loaded its
weights and serves, so the after is the first diagnosis of a full window
after the change with an informative verdict; after `settle_s` without one,
the change is judged on what there is.

Pure: times are passed in; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bubblewatch.daemon.pipelines.analyzer import PipelineResult
from bubblewatch.detect.compare import Comparison, compare
from bubblewatch.detect.types import Verdict

# Verdicts that say nothing about how the engine ran (it may have been restarting).
_UNINFORMATIVE = (Verdict.IDLE, Verdict.INSUFFICIENT_DATA)

Settings = Mapping[str, tuple[object, object]]


@dataclass(frozen=True)
class ChangeOutcome:
    """A judged engine change: when it was noticed, what changed, and the comparison."""

    pipeline: str
    changed_at_s: float
    settings: Settings
    comparison: Comparison

    @property
    def concurrency_ratio(self) -> float | None:
        """Concurrency after over before; None when either is unknown or before is 0."""
        return self.comparison.changes["concurrency"]["ratio"]

    @property
    def borne_out(self) -> bool | None:
        return self.comparison.borne_out

    def log_fields(self) -> dict[str, object]:
        """The key=value fields of the daemon's log line (parsed settings only, no argv)."""
        b, a, ch = self.comparison.before, self.comparison.after, self.comparison.changes
        return {
            "pipeline": self.pipeline,
            "verdict_before": b.verdict,
            "verdict_after": a.verdict,
            "concurrency_before": _fmt(ch["concurrency"]["before"]),
            "concurrency_after": _fmt(ch["concurrency"]["after"]),
            "concurrency_ratio": _fmt(ch["concurrency"]["ratio"]),
            "bubble_ratio_before": _fmt(ch["bubble_ratio"]["before"]),
            "bubble_ratio_after": _fmt(ch["bubble_ratio"]["after"]),
            "borne_out": {True: "true", False: "false", None: "unknown"}[self.borne_out],
            "changed": ",".join(f"{k}={x}->{y}" for k, (x, y) in sorted(self.settings.items())),
            "summary": self.comparison.summary,
        }


@dataclass
class _Pending:
    at_s: float
    settings: dict[str, tuple[object, object]]
    before: PipelineResult


@dataclass
class _Pipeline:
    # (window end, result): the newest analysis, and the newest with an informative verdict.
    last: tuple[float, PipelineResult] | None = None
    last_informative: tuple[float, PipelineResult] | None = None
    pending: _Pending | None = None
    outcome: ChangeOutcome | None = None


class ChangeWatch:
    """Per pipeline: recent diagnoses, a change waiting for its after window, the last outcome.

    `keep_s`: how far back (before the change was noticed) a diagnosis may
    be to serve as the before (run.py: `_change_keep_s`). `settle_s`: how
    long after the change to wait for an informative verdict before judging
    on any. Memory: two results and one pending change per pipeline.
    """

    def __init__(self, keep_s: float, settle_s: float) -> None:
        if not (keep_s > 0 and settle_s >= 0):
            raise ValueError(f"need keep_s > 0 and settle_s >= 0, got {keep_s!r}, {settle_s!r}")
        self.keep_s = keep_s
        self.settle_s = settle_s
        self._pipelines: dict[str, _Pipeline] = {}

    def engine_changed(self, pipeline: str, at_s: float, settings: Settings) -> bool:
        """Note a change noticed at `at_s`; False when there is no diagnosis to compare with.

        A second change before the first is judged keeps the first's before
        and restarts the wait for a full window after the newest change.
        """
        p = self._pipelines.setdefault(pipeline, _Pipeline())
        if p.pending is not None:
            merged = dict(p.pending.settings)
            for k, (_, new) in settings.items():
                old = merged[k][0] if k in merged else settings[k][0]
                merged[k] = (old, new)
            p.pending = _Pending(at_s, merged, p.pending.before)
            return True
        before = self._before(p, at_s)
        p.last = p.last_informative = None  # what follows is the new engine's
        if before is None:
            return False
        p.pending = _Pending(at_s, dict(settings), before)
        return True

    def observe(
        self, result: PipelineResult, window_end_s: float, window_s: float
    ) -> ChangeOutcome | None:
        """Record an analysis; returns the outcome when this one completes a pending change."""
        p = self._pipelines.setdefault(result.pipeline.id, _Pipeline())
        p.last = (window_end_s, result)
        if result.diagnosis.verdict not in _UNINFORMATIVE:
            p.last_informative = p.last
        pending = p.pending
        if pending is None or window_end_s - pending.at_s < window_s:
            return None
        settled = window_end_s - pending.at_s >= max(window_s, self.settle_s)
        if result.diagnosis.verdict in _UNINFORMATIVE and not settled:
            return None
        before = pending.before
        comparison = compare(
            before.diagnosis,
            result.diagnosis,
            recommendations=[r.to_dict() for r in before.recommendations],
        )
        p.pending = None
        p.outcome = ChangeOutcome(result.pipeline.id, pending.at_s, pending.settings, comparison)
        return p.outcome

    def pending(self, pipeline: str) -> bool:
        p = self._pipelines.get(pipeline)
        return p is not None and p.pending is not None

    def outcomes(self) -> dict[str, ChangeOutcome]:
        """The last judged change of each pipeline."""
        return {pid: p.outcome for pid, p in self._pipelines.items() if p.outcome is not None}

    def _before(self, p: _Pipeline, at_s: float) -> PipelineResult | None:
        for kept in (p.last_informative, p.last):
            if kept is not None and kept[0] >= at_s - self.keep_s:
                return kept[1]
        return None


def _fmt(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.3g}"
