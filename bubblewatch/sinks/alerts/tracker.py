"""Which alerts to send now: new ones, repeats while firing, and resolutions.

Pure state machine keyed by fingerprint; the caller passes the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from bubblewatch.sinks.alerts.model import Alert


@dataclass
class _Active:
    alert: Alert
    last_sent_s: float


class AlertTracker:
    """Deduplicates firing alerts by fingerprint and decides what to notify.

    `update(firing, now_s)` takes every alert firing now and returns, in a
    stable order: alerts that started firing, firing alerts last sent at least
    `repeat_interval_s` ago, and alerts that stopped firing (as resolved).
    """

    def __init__(self, repeat_interval_s: float) -> None:
        if repeat_interval_s <= 0:
            raise ValueError(f"repeat_interval_s must be > 0, got {repeat_interval_s}")
        self.repeat_interval_s = repeat_interval_s
        self._active: dict[str, _Active] = {}

    @property
    def active(self) -> list[Alert]:
        return [a.alert for a in self._active.values()]

    def update(self, firing: Iterable[Alert], now_s: float) -> list[Alert]:
        out: list[Alert] = []
        seen: set[str] = set()
        for alert in firing:
            fp = alert.fingerprint
            if fp in seen:
                continue
            seen.add(fp)
            prev = self._active.get(fp)
            if prev is None:
                self._active[fp] = _Active(alert, now_s)
                out.append(alert)
                continue
            # Keep the original start time; refresh the text (numbers may have changed).
            prev.alert = replace(alert, starts_at_s=prev.alert.starts_at_s)
            if now_s - prev.last_sent_s >= self.repeat_interval_s:
                prev.last_sent_s = now_s
                out.append(prev.alert)
        for fp in [fp for fp in self._active if fp not in seen]:
            out.append(self._active.pop(fp).alert.resolved(now_s))
        return out
