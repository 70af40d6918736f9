"""The daemon's alerts: start the dispatcher, turn each analysis's recommendations into alerts."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.pipelines.analyzer import PipelineResult
from bubblewatch.rules import Recommendation
from bubblewatch.sinks.alerts import Alert, AlertDispatcher
from bubblewatch.sinks.alerts.model import iso8601

log = logging.getLogger("bubblewatch.daemon")


def open_dispatcher(cfg: DaemonConfig) -> AlertDispatcher:
    """The delivery workers for the configured receivers, with the firing state restored."""
    a = cfg.alerting
    d = AlertDispatcher(a.receivers, a.state_dir, repeat_interval_s=a.repeat_interval_s)
    if d.restored:
        log.info(
            "restored firing alerts; those whose rule no longer fires are resolved "
            "after the first full analysis window",
            extra={"kv": {"alerts": d.restored}},
        )
    return d


def send_alerts(
    dispatcher: AlertDispatcher,
    results: Sequence[PipelineResult],
    now_wall: float,
    *,
    instance: str,
    settled: bool,
) -> None:
    """Hand the firing recommendations to the dispatcher and log each alert it queues.

    `settled`: the window is full, so alerts restored from before a restart whose
    rule no longer fires may be resolved, and new alerts may start (a partial
    first window, above all its "not enough data", is not an alert).
    """
    firing = [
        Alert.from_recommendation(
            alert_fields(rec),
            now_s=now_wall,
            pipeline=r.pipeline.id,
            extra_labels={"instance": instance},
        )
        for r in results
        for rec in r.recommendations
    ]
    for a in dispatcher.notify(firing, now_wall, settled=settled):
        log.info(
            "alert queued",
            extra={
                "kv": {
                    "alertname": a.name,
                    "status": a.status.value,
                    "fingerprint": a.fingerprint,
                    "starts_at": iso8601(a.starts_at_s),
                    "severity": a.severity,
                }
            },
        )


def alert_fields(rec: Recommendation) -> dict[str, Any]:
    """The recommendation as the alert sink wants it: `fix` as one readable line."""
    d = rec.to_dict()
    fix = rec.fix
    parts: list[str] = []
    if fix is not None:
        parts += [k if v is None else f"{k} {v}" for k, v in fix.add_flags]
        parts += [f"remove {k}" for k in fix.remove_flags]
        parts += [f"{k}={v}" for k, v in fix.to_dict()["set_env"].items()]
        if fix.note:
            parts.append(fix.note)
    d["fix"] = "; ".join(parts)
    return d
