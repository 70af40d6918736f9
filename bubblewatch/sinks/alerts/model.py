"""Alerts: one firing (or resolved) rule on one pipeline, identified by a fingerprint.

An `Alert` is built from a recommendation's dict (`Recommendation.to_dict()`:
rule, severity, summary, description, labels, fix), so this package does not
depend on the rules engine's internals.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from enum import Enum
from typing import Any


class AlertStatus(str, Enum):
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class Alert:
    """A rule's alert. `labels` identify it (their hash is the fingerprint); the rest describes it.

    Times are seconds since the Unix epoch; `ends_at_s` is set once resolved.
    """

    labels: Mapping[str, str]
    summary: str = ""
    description: str = ""
    fix: str = ""
    severity: str = "warning"
    status: AlertStatus = AlertStatus.FIRING
    starts_at_s: float = 0.0
    ends_at_s: float | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "alertname" not in self.labels:
            raise ValueError("alert labels need an 'alertname'")
        if not self.severity:
            raise ValueError("alert severity must not be empty")

    @property
    def name(self) -> str:
        return self.labels["alertname"]

    @property
    def fingerprint(self) -> str:
        """Stable id of the alert: hex SHA-256 of its sorted labels (16 chars)."""
        canon = json.dumps(sorted(self.labels.items()), separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def resolved(self, at_s: float) -> Alert:
        return replace(self, status=AlertStatus.RESOLVED, ends_at_s=at_s)

    def to_dict(self) -> dict[str, Any]:
        """The generic webhook's per-alert object (docs/daemon.md, "Webhook JSON")."""
        return {
            "fingerprint": self.fingerprint,
            "status": self.status.value,
            "labels": dict(sorted(self.labels.items())),
            "severity": self.severity,
            "summary": self.summary,
            "description": self.description,
            "fix": self.fix,
            "annotations": dict(self.annotations),
            "starts_at": iso8601(self.starts_at_s),
            "ends_at": None if self.ends_at_s is None else iso8601(self.ends_at_s),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Alert:
        """Inverse of `to_dict` (used by the on-disk queue)."""
        ends = d.get("ends_at")
        return cls(
            labels={str(k): str(v) for k, v in d["labels"].items()},
            summary=str(d.get("summary", "")),
            description=str(d.get("description", "")),
            fix=str(d.get("fix", "")),
            severity=str(d.get("severity", "warning")),
            status=AlertStatus(d.get("status", "firing")),
            starts_at_s=parse_iso8601(str(d["starts_at"])),
            ends_at_s=None if ends is None else parse_iso8601(str(ends)),
            annotations={str(k): str(v) for k, v in d.get("annotations", {}).items()},
        )

    @classmethod
    def from_recommendation(
        cls,
        rec: Mapping[str, Any],
        *,
        now_s: float,
        pipeline: str = "",
        extra_labels: Mapping[str, str] | None = None,
    ) -> Alert:
        """An alert for a firing recommendation (`Recommendation.to_dict()`).

        Identity labels: alertname (the rule), pipeline, severity, the
        recommendation's own labels, then `extra_labels` (e.g. instance).
        """
        rule = rec.get("rule")
        if not isinstance(rule, str) or not rule:
            raise ValueError(f"recommendation has no 'rule' name: {sorted(rec)}")
        severity = str(rec.get("severity", "warning"))
        labels: dict[str, str] = {"alertname": rule, "severity": severity}
        if pipeline:
            labels["pipeline"] = pipeline
        rec_labels = rec.get("labels") or {}
        if not isinstance(rec_labels, Mapping):
            raise ValueError(f"recommendation {rule!r} 'labels' must be a mapping")
        labels.update({str(k): str(v) for k, v in rec_labels.items()})
        labels.update(extra_labels or {})
        fix = rec.get("fix") or ""
        return cls(
            labels=labels,
            summary=_text(rec.get("summary")),
            description=_text(rec.get("description")),  # a rule without one: "", not "None"
            fix=fix if isinstance(fix, str) else json.dumps(fix, sort_keys=True),
            severity=severity,
            starts_at_s=now_s,
        )


def _text(value: object) -> str:
    return "" if value is None else str(value)


def iso8601(t_s: float) -> str:
    """RFC 3339 UTC with milliseconds, as Alertmanager expects."""
    dt = datetime.fromtimestamp(t_s, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_iso8601(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
