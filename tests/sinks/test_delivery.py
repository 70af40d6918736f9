"""Delivery to real HTTP receivers on 127.0.0.1 that fail, stall, recover, and restarts."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from bubblewatch.sinks.alerts import (
    Alert,
    AlertDispatcher,
    AlertStatus,
    ReceiverConfig,
    RetryPolicy,
)

from ._signing import verify

FAST = RetryPolicy(timeout_s=0.3, initial_backoff_s=0.02, max_backoff_s=0.1)


def alert(i: int) -> Alert:
    return Alert(
        labels={"alertname": f"rule{i:02d}", "pipeline": "pp-a"},
        summary=f"n={i}",
        starts_at_s=1000.0 + i,
    )


def names(bodies: list[dict]) -> list[str]:
    return [a["labels"]["alertname"] for b in bodies for a in b["alerts"]]


def wait_until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def assert_in_order_at_least_once(got: list[str], sent: list[str]) -> None:
    """Every sent item arrived; duplicates only as immediate re-sends; order kept."""
    dedup = [x for i, x in enumerate(got) if i == 0 or got[i - 1] != x]
    assert dedup == sent


def test_fail_stall_recover_nothing_lost_order_kept(receiver_server, tmp_path, caplog) -> None:
    secret = "hunter2-secret"
    with receiver_server() as rec:
        cfg = ReceiverConfig("ops", "webhook", rec.url, secret=secret, retry=FAST)
        disp = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        caplog.set_level(logging.DEBUG, logger="bubblewatch")
        try:
            rec.mode = "fail"
            sent = [alert(i) for i in range(3)]
            disp.notify(sent, now_s=1.0)
            wait_until(lambda: rec.attempts >= 3)
            rec.mode, rec.stall_s = "stall", 0.6
            disp.notify([*sent, alert(3)], now_s=2.0)  # one more firing
            wait_until(lambda: rec.attempts >= 5)
            rec.mode = "ok"
            bodies = rec.wait_for(4)
            wait_until(lambda: disp.stats()[0].queue_length == 0)
            stats = disp.stats()[0]
        finally:
            disp.close()
    assert_in_order_at_least_once(names(bodies), ["rule00", "rule01", "rule02", "rule03"])
    assert stats.deliveries["error"] >= 1
    assert stats.deliveries["timeout"] >= 1
    assert stats.deliveries["success"] >= 4
    assert stats.dropped_total == 0
    for headers, raw in rec.accepted_raw:  # every delivery is signed and verifiable
        assert verify(
            secret, headers["X-Bubblewatch-Timestamp"], raw, headers["X-Bubblewatch-Signature"]
        )
    log_text = caplog.text + repr([r.__dict__ for r in caplog.records])
    assert "alert delivery failed" in caplog.text
    assert secret not in log_text and rec.url not in log_text


def test_slow_receiver_never_blocks_notify(receiver_server, tmp_path) -> None:
    with receiver_server() as rec:
        rec.mode, rec.stall_s = "stall", 2.0
        slow = RetryPolicy(timeout_s=1.5, initial_backoff_s=0.05, max_backoff_s=0.1)
        disp = AlertDispatcher(
            [ReceiverConfig("slow", "webhook", rec.url, retry=slow)],
            tmp_path,
            repeat_interval_s=3600,
        )
        try:
            disp.notify([alert(0)], now_s=0)
            wait_until(lambda: rec.attempts >= 1)
            t0 = time.monotonic()
            for i in range(1, 20):
                disp.notify([alert(j) for j in range(i + 1)], now_s=float(i))
            assert time.monotonic() - t0 < 1.0  # queued to disk, not sent inline (send: 1.5 s)
            assert disp.stats()[0].queue_length == 20
        finally:
            t1 = time.monotonic()
            disp.close(timeout_s=3.0)
            assert time.monotonic() - t1 < 3.0


def test_restart_with_pending_items_delivers_them(receiver_server, tmp_path) -> None:
    with receiver_server() as rec:
        rec.mode = "fail"
        cfg = ReceiverConfig("ops", "webhook", rec.url, retry=FAST)
        first = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        first.notify([alert(i) for i in range(5)], now_s=1.0)
        wait_until(lambda: rec.attempts >= 2)
        first.close()
        assert rec.bodies() == []
        rec.mode = "ok"
        second = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            bodies = rec.wait_for(5)
            wait_until(lambda: second.stats()[0].queue_length == 0)
        finally:
            second.close()
    assert_in_order_at_least_once(names(bodies), [f"rule{i:02d}" for i in range(5)])


def test_bound_exceeded_drops_oldest_and_counts(receiver_server, tmp_path) -> None:
    with receiver_server() as rec:
        rec.mode = "fail"
        cfg = ReceiverConfig("ops", "webhook", rec.url, max_queue=3, retry=FAST)
        disp = AlertDispatcher([cfg], tmp_path, repeat_interval_s=3600)
        try:
            for i in range(6):
                disp.notify([alert(j) for j in range(i + 1)], now_s=float(i))
            st = disp.stats()[0]
            assert st.queue_length == 3 and st.dropped_total == 3
            rec.mode = "ok"
            bodies = rec.wait_for(3)
            wait_until(lambda: disp.stats()[0].queue_length == 0)
        finally:
            disp.close()
    assert_in_order_at_least_once(names(bodies), ["rule03", "rule04", "rule05"])


def test_rejected_item_is_dropped_not_retried_forever(receiver_server, tmp_path) -> None:
    with receiver_server() as rec:
        rec.mode = "reject"
        disp = AlertDispatcher(
            [ReceiverConfig("ops", "webhook", rec.url, retry=FAST)],
            tmp_path,
            repeat_interval_s=3600,
        )
        try:
            disp.notify([alert(0)], now_s=0)
            wait_until(lambda: disp.stats()[0].queue_length == 0)
            st = disp.stats()[0]
        finally:
            disp.close()
    assert st.deliveries["rejected"] == 1 and st.dropped_total == 1 and rec.attempts == 1


def test_stats_never_show_an_item_neither_queued_nor_dropped(
    receiver_server, tmp_path, monkeypatch
) -> None:
    """While the worker removes a rejected item from the disk, a reader of the stats sees it
    either still queued or already dropped: the sum stays 1 (the CI failure this fixes read 0)."""
    from bubblewatch.sinks.alerts.queue import PersistentQueue

    slow_drop = PersistentQueue.drop

    def drop(self, item_id: int) -> None:
        time.sleep(0.3)  # widen the window between "rejected" and "removed from disk"
        slow_drop(self, item_id)

    monkeypatch.setattr(PersistentQueue, "drop", drop)
    with receiver_server() as rec:
        rec.mode = "reject"
        disp = AlertDispatcher(
            [ReceiverConfig("ops", "webhook", rec.url, retry=FAST)],
            tmp_path,
            repeat_interval_s=3600,
        )
        seen: list[tuple[int, int]] = []
        try:
            disp.notify([alert(0)], now_s=0)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                st = disp.stats()[0]
                seen.append((st.queue_length, st.dropped_total))
                if st.dropped_total and st.deliveries["rejected"]:
                    break
                time.sleep(0.005)
        finally:
            disp.close()
    assert seen[-1] == (0, 1)
    assert all(length + dropped == 1 for length, dropped in seen), sorted(set(seen))


def test_resolved_and_two_receivers_each_get_everything(receiver_server, tmp_path) -> None:
    with receiver_server() as a, receiver_server() as am:
        cfgs = [
            ReceiverConfig("hook", "webhook", a.url, retry=FAST),
            ReceiverConfig("am", "alertmanager", am.url, retry=FAST),
        ]
        disp = AlertDispatcher(cfgs, tmp_path, repeat_interval_s=3600)
        try:
            am.mode = "fail"  # one receiver down does not hold the other back
            disp.notify([alert(0)], now_s=10)
            disp.notify([], now_s=20)
            got = a.wait_for(2)
            assert am.bodies() == []
            am.mode = "ok"
            am_got = am.wait_for(2)
        finally:
            disp.close()
    assert [x["alerts"][0]["status"] for x in got] == ["firing", "resolved"]
    assert [x[0]["endsAt"] for x in am_got][1] == "1970-01-01T00:00:20.000Z"
    assert set(am.paths) == {"/hook/api/v2/alerts"}
    assert AlertStatus.RESOLVED.value == "resolved"


def test_duplicate_receiver_names_rejected(receiver_server, tmp_path) -> None:
    cfg = ReceiverConfig("ops", "webhook", "http://127.0.0.1:9/")
    with pytest.raises(ValueError, match="two receivers are named 'ops'"):
        AlertDispatcher([cfg, cfg], tmp_path)
    assert not [t for t in threading.enumerate() if t.name.startswith("bubblewatch-deliver")]
