"""Which alerts to send now: new ones, repeats while firing, and resolutions.

Pure state machine keyed by fingerprint; the caller passes the clock.
Its firing state can be saved and restored (`snapshot`, `restore`), so a
restarted daemon keeps each alert's `starts_at` and still resolves alerts
whose rule stopped firing while it was down (`bubblewatch.sinks.alerts.state`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from bubblewatch.sinks.alerts.model import Alert, AlertStatus


@dataclass(frozen=True)
class TrackedAlert:
    """A firing alert as the tracker holds it: the alert and when it was last sent."""

    alert: Alert
    last_sent_s: float


@dataclass
class _Active:
    alert: Alert
    last_sent_s: float
    restored: bool = False  # from a previous run, not yet seen firing in this one


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

    def snapshot(self) -> list[TrackedAlert]:
        """The firing state, to save; `restore` takes it back."""
        return [TrackedAlert(a.alert, a.last_sent_s) for a in self._active.values()]

    def restore(self, items: Iterable[TrackedAlert]) -> int:
        """Take back a saved firing state (after a restart); returns how many were restored.

        A restored alert that fires again keeps its `starts_at` and is re-sent
        only when `repeat_interval_s` has passed since it was last sent. One
        that does not fire is resolved by the first `update(..., settled=True)`;
        until then (the daemon's first analysis window is not full yet) it is kept.
        """
        n = 0
        for item in items:
            a = item.alert
            if a.status is not AlertStatus.FIRING or a.fingerprint in self._active:
                continue
            self._active[a.fingerprint] = _Active(a, item.last_sent_s, restored=True)
            n += 1
        return n

    def update(self, firing: Iterable[Alert], now_s: float, *, settled: bool = True) -> list[Alert]:
        """Feed every alert firing now.

        `settled` False (the first analysis window after a start is not full
        yet) holds restored alerts unresolved and starts no new alert: what a
        partial window shows (not enough data, above all) is not news.
        """
        out: list[Alert] = []
        seen: set[str] = set()
        for alert in firing:
            fp = alert.fingerprint
            if fp in seen:
                continue
            seen.add(fp)
            prev = self._active.get(fp)
            if prev is None:
                if settled:  # a partial first window (a fresh start) starts no alert
                    self._active[fp] = _Active(alert, now_s)
                    out.append(alert)
                continue
            # Keep the original start time; refresh the text (numbers may have changed).
            prev.alert = replace(alert, starts_at_s=prev.alert.starts_at_s)
            prev.restored = False
            if now_s - prev.last_sent_s >= self.repeat_interval_s:
                prev.last_sent_s = now_s
                out.append(prev.alert)
        for fp in [fp for fp in self._active if fp not in seen]:
            if self._active[fp].restored and not settled:
                continue
            out.append(self._active.pop(fp).alert.resolved(now_s))
        return out
