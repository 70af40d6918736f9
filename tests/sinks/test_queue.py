"""The persistent per-receiver queue: FIFO, bounded with oldest dropped, survives reopening."""

from __future__ import annotations

import pytest

from bubblewatch.sinks.alerts import PersistentQueue


def test_fifo_ack_and_persistence(tmp_path) -> None:
    path = tmp_path / "q.sqlite3"
    q = PersistentQueue(path, max_items=10)
    for i in range(3):
        assert q.put({"n": i}, now_s=i) == 0
    head = q.head()
    assert head is not None and head.payload == {"n": 0} and head.attempts == 0
    q.record_attempt(head.id)
    q.close()

    q2 = PersistentQueue(path, max_items=10)
    head2 = q2.head()
    assert head2 is not None and head2.payload == {"n": 0} and head2.attempts == 1
    q2.ack(head2.id)
    assert [q2.head().payload["n"]] == [1]  # type: ignore[union-attr]
    assert len(q2) == 2
    q2.close()


def test_bound_drops_oldest_and_counts_across_reopen(tmp_path) -> None:
    path = tmp_path / "q.sqlite3"
    q = PersistentQueue(path, max_items=3)
    dropped = [q.put({"n": i}, now_s=0) for i in range(5)]
    assert dropped == [0, 0, 0, 1, 1]
    assert len(q) == 3 and q.dropped_total == 2
    assert q.head().payload == {"n": 2}  # type: ignore[union-attr]
    q.drop(q.head().id)  # type: ignore[union-attr]
    assert q.dropped_total == 3
    q.close()
    assert PersistentQueue(path, max_items=3).dropped_total == 3


def test_bad_bound_and_unwritable_path(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_items"):
        PersistentQueue(tmp_path / "q", max_items=0)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception, match="cannot open alert queue") as e:
        PersistentQueue(blocker / "q.sqlite3", max_items=1)
    assert str(blocker) in str(e.value)
