"""Alerts under hostile receivers and disks: redirects, credentials, a full spool.

Pins: a 302 was followed as a body-less GET to another host with the
receiver's Authorization header and counted as success (alerts lost,
credentials leaked); a full spool disk aborted queueing for every receiver
after the first failure ("cannot rollback - no transaction is active"), and
a dispatcher on a full disk failed at start with a traceback.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from bubblewatch.sinks.alerts import (
    AlertDispatcher,
    AlertStateStore,
    PersistentQueue,
    QueueError,
    ReceiverConfig,
)

from ._alerts import FAST, alert, metrics_text, wait_until
from ._http import endpoint
from .conftest import fill

SECRET = "Bearer tok-4f8e2c-do-not-leak"


def delivered(hits) -> list[str]:
    import json

    return [a["labels"]["alertname"] for h in hits for a in json.loads(h.body)["alerts"]]


def test_redirect_is_a_failure_retried_and_never_followed(tmp_path: Path) -> None:
    with endpoint() as thief, endpoint(302, {"Location": "x"}) as hook:
        hook.headers["Location"] = thief.url
        cfg = ReceiverConfig(
            "hook", "webhook", hook.url, headers={"Authorization": SECRET}, retry=FAST
        )
        disp = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            disp.notify([alert(1), alert(2)], now_s=1.0)
            hook.wait_hits(3)
            # the worker counts a try once it has read the answer, after the receiver saw it
            wait_until(lambda: disp.stats()[0].deliveries["error"] >= 3)
            stats = disp.stats()[0]
            assert stats.deliveries["success"] == 0
            assert stats.queue_length == 2 and stats.dropped_total == 0
            hook.status = 200  # the receiver is fixed: nothing was lost meanwhile
            wait_until(lambda: disp.stats()[0].queue_length == 0)
        finally:
            disp.close()
        assert thief.all_hits() == []  # nothing, and no credential, went to the other host
    got = delivered([h for h in hook.all_hits() if h.body])
    assert got[-2:] == ["Rule1", "Rule2"]
    assert all(h.method == "POST" for h in hook.all_hits())


def test_credentials_in_the_url_become_basic_auth_and_are_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="bubblewatch")
    with endpoint(500) as hook:
        url = f"http://ops:p%40ss-w0rd@127.0.0.1:{hook.port}/hook"
        disp = AlertDispatcher(
            [ReceiverConfig("hook", "webhook", url, retry=FAST)], tmp_path, repeat_interval_s=60
        )
        try:
            disp.notify([alert(1)], now_s=1.0)
            (first, *_) = hook.wait_hits(2)
        finally:
            disp.close()
    assert first.path == "/hook"
    assert first.headers["Authorization"] == "Basic " + base64.b64encode(b"ops:p@ss-w0rd").decode()
    assert "alert delivery failed" in caplog.text
    logged = caplog.text + repr([r.__dict__ for r in caplog.records])
    assert "p%40ss-w0rd" not in logged and "p@ss-w0rd" not in logged


def _failing_spool(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Make every write to receiver `name`'s queue fail as a full disk does; returns a switch."""
    broken = [1]
    real_put = PersistentQueue.put

    def put(self: PersistentQueue, payload: dict, now_s: float) -> int:
        if broken[0] and self.path.name == f"alerts-{name}.sqlite3":
            raise QueueError(f"{self.path}: alert queue error: database or disk is full")
        return real_put(self, payload, now_s)

    monkeypatch.setattr(PersistentQueue, "put", put)
    return broken


def test_redirecting_full_and_healthy_receivers_each_on_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: one receiver redirects, one spool is full, one is healthy."""
    broken = _failing_spool(monkeypatch, "full")
    with (
        endpoint() as thief,
        endpoint(302) as redirecting,
        endpoint() as full,
        endpoint() as healthy,
    ):
        redirecting.headers["Location"] = thief.url
        cfgs = [
            ReceiverConfig("redirecting", "webhook", redirecting.url,
                           headers={"Authorization": SECRET}, retry=FAST),
            ReceiverConfig("full", "webhook", full.url, retry=FAST),
            ReceiverConfig("healthy", "webhook", healthy.url, retry=FAST),
        ]  # fmt: skip
        disp = AlertDispatcher(cfgs, tmp_path, repeat_interval_s=3600)
        try:
            sent = [alert(i) for i in range(4)]
            for i in range(4):  # four analyses, a new alert each time
                disp.notify(sent[: i + 1], now_s=10.0 + i)
            healthy.wait_hits(4)
            full.wait_hits(4)  # delivered from memory while its disk refuses them
            redirecting.wait_hits(4)
            # a delivery is counted once its answer is read, after the receiver saw it
            wait_until(
                lambda: all(
                    s.deliveries["success"] >= 4
                    for s in disp.stats()
                    if s.receiver != "redirecting"
                )
            )
            stats = {s.receiver: s for s in disp.stats()}
            assert stats["full"].spool_errors_total >= 4
            assert stats["redirecting"].deliveries["success"] == 0
            assert stats["redirecting"].queue_length == 4  # not delivered: still queued
            broken[0] = 0  # space freed: the next alert goes through the disk again
            disp.notify([*sent, alert(9)], now_s=20.0)
            healthy.wait_hits(5)
            full.wait_hits(5)
            text = metrics_text(disp)
        finally:
            disp.close()
        assert thief.all_hits() == []
    want = ["Rule0", "Rule1", "Rule2", "Rule3", "Rule9"]
    assert delivered(healthy.all_hits()) == want
    assert delivered(full.all_hits()) == want
    assert stats["healthy"].deliveries["success"] == 4
    assert stats["full"].deliveries["success"] == 4
    assert 'bubblewatch_alert_spool_errors_total{receiver="full"}' in text
    assert 'bubblewatch_alert_spool_errors_total{receiver="healthy"} 0.0' in text
    assert 'bubblewatch_webhook_deliveries_total{outcome="success",receiver="redirecting"} 0.0' in (
        text
    )


def test_held_alerts_are_bounded_and_the_overflow_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_spool(monkeypatch, "full")
    with endpoint(500) as down:
        cfg = ReceiverConfig("full", "webhook", down.url, max_queue=3, retry=FAST)
        disp = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            for i in range(5):
                disp.notify([alert(j) for j in range(i + 1)], now_s=float(i))
            stats = disp.stats()[0]
        finally:
            disp.close()
    assert stats.queue_length == 3
    assert stats.dropped_total == 2


def test_a_full_disk_at_start_and_later_loses_nothing_while_running(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real full filesystem: no traceback at start, delivery from memory, recovery."""
    caplog.set_level(logging.ERROR, logger="bubblewatch")
    free = fill(small_fs)
    with endpoint() as hook:
        cfg = ReceiverConfig("hook", "webhook", hook.url, retry=FAST)
        disp = AlertDispatcher([cfg], small_fs / "state", repeat_interval_s=3600)
        try:
            errors = [r.kv["error"] for r in caplog.records if hasattr(r, "kv")]
            assert any("cannot open alert queue" in e for e in errors)  # said, not raised
            disp.notify([alert(1)], now_s=1.0)
            disp.notify([alert(1), alert(2)], now_s=2.0)
            hook.wait_hits(2)
            assert disp.stats()[0].spool_errors_total >= 1
            free()
            disp.notify([alert(1), alert(2), alert(3)], now_s=3.0)
            hook.wait_hits(3)
            wait_until(lambda: disp.stats()[0].queue_length == 0)
        finally:
            disp.close()
        assert (small_fs / "state" / "alerts-hook.sqlite3").exists()
    assert delivered(hook.all_hits()) == ["Rule1", "Rule2", "Rule3"]


def test_what_a_kill_would_lose_on_a_full_disk_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alerts held only in memory and an unsaved firing state are exported, then clear.

    Pins: with a full spool the alerts held in memory and the firing state were
    lost by a SIGKILL without a trace; after the restart the same alerts fired
    again with a new starts_at. What a kill would lose is now a metric.
    """
    broken = _failing_spool(monkeypatch, "full")
    real_save = AlertStateStore.save

    def save(self: AlertStateStore, items: object) -> None:
        if broken[0]:
            raise QueueError("alerts-state.sqlite3: database or disk is full")
        real_save(self, items)  # type: ignore[arg-type]

    monkeypatch.setattr(AlertStateStore, "save", save)
    with endpoint(500) as down:
        cfg = ReceiverConfig("full", "webhook", down.url, retry=FAST)
        disp = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            disp.notify([alert(1), alert(2)], now_s=1.0)
            during = disp.stats()[0].held_in_memory, disp.state_saved, metrics_text(disp)
            broken[0] = 0  # space again: the next analysis writes both
            disp.notify([alert(1), alert(2)], now_s=2.0)
            wait_until(lambda: disp.stats()[0].held_in_memory == 0)
            after = disp.state_saved, metrics_text(disp)
        finally:
            disp.close()
    held, saved, text = during
    assert held == 2 and not saved
    assert 'bubblewatch_alerts_held_in_memory{receiver="full"} 2.0' in text
    assert "bubblewatch_alert_state_saved 0.0" in text
    assert after[0] and "bubblewatch_alert_state_saved 1.0" in after[1]
    assert 'bubblewatch_alerts_held_in_memory{receiver="full"} 0.0' in after[1]
