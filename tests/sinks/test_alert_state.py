"""Alert firing state across restarts: the tracker's restore, the SQLite store, the dispatcher.

The bug these pin down: after a restart a rule still firing was re-sent as a
new firing alert with a new `starts_at`, and a rule that stopped while the
daemon was down never got a `resolved`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from bubblewatch.sinks.alerts import (
    Alert,
    AlertDispatcher,
    AlertStatus,
    AlertTracker,
    QueueError,
    ReceiverConfig,
    RetryPolicy,
)
from bubblewatch.sinks.alerts.state import FILENAME, AlertStateStore
from bubblewatch.sinks.alerts.tracker import TrackedAlert

from .conftest import Receiver

FAST = RetryPolicy(timeout_s=0.3, initial_backoff_s=0.02, max_backoff_s=0.1)


def alert(name: str, starts_at_s: float = 0.0, summary: str = "") -> Alert:
    return Alert(
        labels={"alertname": name, "pipeline": "h/sglang:30000", "instance": "h"},
        summary=summary or f"{name} fires",
        annotations={"runbook": f"https://runbooks.example/{name}"},
        severity="critical",
        starts_at_s=starts_at_s,
    )


def test_tracker_restore_keeps_start_holds_until_settled_then_resolves() -> None:
    first = AlertTracker(repeat_interval_s=100.0)
    assert [a.name for a in first.update([alert("A", 10.0), alert("B", 10.0)], 10.0)] == ["A", "B"]
    saved = first.snapshot()

    again = AlertTracker(repeat_interval_s=100.0)
    assert again.restore(saved) == 2
    # A fires again with new numbers: no new firing alert, start time kept, text refreshed.
    assert again.update([alert("A", 50.0, "A fires harder")], 50.0, settled=False) == []
    (a,) = [x for x in again.active if x.name == "A"]
    assert a.starts_at_s == 10.0 and a.summary == "A fires harder"
    # B does not fire, but the first window is not full yet: held, not resolved.
    assert [x.name for x in again.active] == ["A", "B"]
    assert again.update([alert("A", 55.0)], 55.0, settled=False) == []
    # The first full window: B is resolved with its original start and an end time.
    (resolved,) = again.update([alert("A", 60.0)], 60.0, settled=True)
    assert (resolved.name, resolved.status) == ("B", AlertStatus.RESOLVED)
    assert (resolved.starts_at_s, resolved.ends_at_s) == (10.0, 60.0)
    assert resolved.annotations == {"runbook": "https://runbooks.example/B"}
    # A is re-sent once repeat_interval has passed since it was last sent (before the restart).
    assert again.update([alert("A", 109.0)], 109.0) == []
    (repeat,) = again.update([alert("A", 110.0)], 110.0)
    assert repeat.starts_at_s == 10.0 and repeat.status is AlertStatus.FIRING


def test_a_partial_first_window_starts_no_alert() -> None:
    """Regression: every start sent InsufficientData firing, then resolved, to all receivers."""
    t = AlertTracker(repeat_interval_s=100.0)
    assert t.update([alert("InsufficientData", 1.0)], 1.0, settled=False) == []
    assert t.active == []
    assert t.update([], 2.0, settled=True) == []  # nothing to resolve either
    (a,) = t.update([alert("A", 3.0)], 3.0, settled=True)
    assert a.name == "A" and a.starts_at_s == 3.0


def test_tracker_settled_update_resolves_at_once_and_skips_resolved_or_known() -> None:
    t = AlertTracker(repeat_interval_s=100.0)
    t.update([alert("A", 1.0)], 1.0)
    restored = [
        TrackedAlert(alert("A", 0.5), 0.5),  # already tracked: ignored
        TrackedAlert(alert("B", 0.0).resolved(2.0), 2.0),  # resolved: nothing to keep
        TrackedAlert(alert("C", 0.0), 0.0),
    ]
    assert t.restore(restored) == 1
    out = t.update([alert("A", 5.0)], 5.0)  # settled by default (a reload, not a start)
    assert [(x.name, x.status.value) for x in out] == [("C", "resolved")]


def test_store_round_trip_replace_and_exact_start(tmp_path: Path) -> None:
    store = AlertStateStore(tmp_path / "s" / FILENAME)
    a = alert("A", 1_700_000_000.123456)
    store.save([TrackedAlert(a, 1_700_000_100.5), TrackedAlert(alert("B", 5.0), 6.0)])
    store.save([TrackedAlert(a, 1_700_000_200.5)])  # replaces the whole set
    store.close()
    (got,) = AlertStateStore(tmp_path / "s" / FILENAME).load()
    assert got.alert == a  # labels, annotations, texts, severity, exact start
    assert got.alert.fingerprint == a.fingerprint
    assert got.last_sent_s == 1_700_000_200.5


def test_store_skips_a_bad_row_naming_it_and_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / FILENAME
    store = AlertStateStore(path)
    store.save([TrackedAlert(alert("A", 1.0), 1.0)])
    store.close()
    bad = '{"labels": {}, "starts_at": "2024-01-01T00:00:00.000Z"}'
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO firing VALUES ('0123456789abcdef', 1.0, 1.0, ?)", (bad,))
    db.close()
    caplog.set_level(logging.WARNING, logger="bubblewatch.alerts")
    got = AlertStateStore(path).load()
    assert [t.alert.name for t in got] == ["A"]
    (rec,) = [r for r in caplog.records if r.getMessage() == "skipping an unreadable saved alert"]
    kv = rec.kv  # type: ignore[attr-defined]
    assert kv["file"] == str(path) and kv["fingerprint"] == "0123456789abcdef"
    assert "alertname" in kv["error"]


def test_store_that_cannot_be_opened_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where the state directory should be")
    with pytest.raises(QueueError, match=r"blocker/alerts-state\.sqlite3: cannot open alert state"):
        AlertStateStore(tmp_path / "blocker" / FILENAME)


def test_dispatcher_restart_keeps_firing_and_resolves_the_stopped(
    receiver_server: Callable[[], AbstractContextManager[Receiver]], tmp_path: Path
) -> None:
    with receiver_server() as rec:
        cfg = ReceiverConfig("ops", "webhook", rec.url, retry=FAST)
        first = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            first.notify([alert("A", 100.0), alert("B", 100.0)], 100.0)
            rec.wait_for(2)
        finally:
            first.close()
        second = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            assert second.restored == 2
            assert second.notify([alert("A", 200.0)], 200.0, settled=False) == []
            (resolved,) = second.notify([alert("A", 210.0)], 210.0, settled=True)
            bodies = rec.wait_for(3)
        finally:
            second.close()
        third = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        third.close()
    got = [(a["labels"]["alertname"], a["status"], a["starts_at"], a["ends_at"])
           for b in bodies for a in b["alerts"]]  # fmt: skip
    start = "1970-01-01T00:01:40.000Z"
    assert got == [
        ("A", "firing", start, None),
        ("B", "firing", start, None),
        ("B", "resolved", start, "1970-01-01T00:03:30.000Z"),
    ]
    assert resolved.name == "B"
    assert third.restored == 1  # A still firing; B's resolution was saved


def test_no_receivers_no_state_file(tmp_path: Path) -> None:
    d = AlertDispatcher([], tmp_path / "state", repeat_interval_s=3600)
    d.notify([alert("A", 1.0)], 1.0)
    d.close()
    assert not (tmp_path / "state").exists()
