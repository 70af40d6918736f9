"""Receivers turn alerts into HTTP requests: generic JSON webhook, Slack, Alertmanager v2.

A receiver only builds requests; `transport.py` sends them. URLs and secrets
live in the receiver and never in its `name`, which is what logs and metrics see.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bubblewatch.sinks.alerts.model import Alert, AlertStatus, iso8601

SIGNATURE_HEADER = "X-Bubblewatch-Signature"
TIMESTAMP_HEADER = "X-Bubblewatch-Timestamp"
SCHEMA_VERSION = "1"


@dataclass(frozen=True)
class HttpRequest:
    url: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    method: str = "POST"


class Receiver(Protocol):
    """Something alerts are delivered to."""

    @property
    def name(self) -> str: ...

    def secrets(self) -> tuple[str, ...]:
        """Strings that must never appear in logs or metrics (URL, secret)."""
        ...

    def build_request(self, alerts: Sequence[Alert], now_s: float) -> HttpRequest: ...


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over "<timestamp>.<body>", as "sha256=<hex>" (docs/daemon.md)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


@dataclass(frozen=True)
class WebhookReceiver:
    """Generic JSON: {"version", "receiver", "sent_at", "alerts": [Alert.to_dict()]}."""

    name: str
    url: str = field(repr=False)
    secret: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.url, self.secret, *self.headers.values()) if s)

    def build_request(self, alerts: Sequence[Alert], now_s: float) -> HttpRequest:
        body = _json(
            {
                "version": SCHEMA_VERSION,
                "receiver": self.name,
                "sent_at": iso8601(now_s),
                "alerts": [a.to_dict() for a in alerts],
            }
        )
        headers = {"Content-Type": "application/json", **self.headers}
        if self.secret:
            ts = str(int(now_s))
            headers[TIMESTAMP_HEADER] = ts
            headers[SIGNATURE_HEADER] = sign(self.secret, ts, body)
        return HttpRequest(self.url, body, headers)


_SLACK_EMOJI = {"critical": ":red_circle:", "warning": ":warning:", "info": ":information_source:"}


@dataclass(frozen=True)
class SlackReceiver:
    """Slack incoming webhook: {"text", "blocks"} with one section per alert."""

    name: str
    url: str = field(repr=False)

    def secrets(self) -> tuple[str, ...]:
        return (self.url,)

    def build_request(self, alerts: Sequence[Alert], now_s: float) -> HttpRequest:
        blocks: list[dict[str, object]] = []
        lines: list[str] = []
        for a in alerts:
            resolved = a.status is AlertStatus.RESOLVED
            icon = ":white_check_mark:" if resolved else _SLACK_EMOJI.get(a.severity, ":bell:")
            where = f" on pipeline {a.labels['pipeline']}" if "pipeline" in a.labels else ""
            head = f"{icon} [{a.status.value.upper()}] {a.name}{where}: {a.summary}"
            lines.append(head)
            text = f"*{head}*"
            if a.description and not resolved:
                text += f"\n{a.description}"
            if a.fix and not resolved:
                text += f"\n*Fix:*\n```{a.fix}```"
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}})
        return HttpRequest(
            self.url,
            _json({"text": "\n".join(lines), "blocks": blocks}),
            {"Content-Type": "application/json"},
        )


@dataclass(frozen=True)
class AlertmanagerReceiver:
    """Alertmanager API v2: POST <url>/api/v2/alerts with a list of postable alerts."""

    name: str
    url: str = field(repr=False)
    generator_url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    firing_validity_s: float = 3600.0

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.url, *self.headers.values()) if s)

    def build_request(self, alerts: Sequence[Alert], now_s: float) -> HttpRequest:
        body: list[dict[str, object]] = []
        for a in alerts:
            annotations = {"summary": a.summary, "description": a.description, **a.annotations}
            if a.fix:
                annotations["fix"] = a.fix
            item: dict[str, object] = {
                "labels": dict(a.labels),
                "annotations": {k: v for k, v in annotations.items() if v},
                "startsAt": iso8601(a.starts_at_s),
                "generatorURL": self.generator_url,
            }
            # Firing: endsAt in the future, as Prometheus does (4 x its resend
            # interval), so an alert we stop re-sending (daemon gone) expires.
            ends = a.ends_at_s if a.ends_at_s is not None else now_s + self.firing_validity_s
            item["endsAt"] = iso8601(ends)
            body.append(item)
        url = self.url.rstrip("/")
        if not url.endswith("/api/v2/alerts"):
            url += "/api/v2/alerts"
        return HttpRequest(url, _json(body), {"Content-Type": "application/json", **self.headers})
