"""The alert tracker's firing state on disk, so a restart neither re-fires nor forgets alerts.

One SQLite file (`state_dir/alerts-state.sqlite3`, beside the receivers'
queues, same settings: WAL, `synchronous=FULL`) with one row per firing
alert: its fingerprint, the alert (labels, annotations, texts, severity) as
the webhook JSON, its `starts_at` and when it was last sent. `save` replaces
the whole set in one transaction, so a kill leaves the previous set or the
new one. A row that cannot be read back is skipped and said once, naming
the file and the fingerprint; the others are restored.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from bubblewatch.sinks.alerts.model import Alert
from bubblewatch.sinks.alerts.queue import Database, QueueError
from bubblewatch.sinks.alerts.tracker import TrackedAlert

log = logging.getLogger("bubblewatch.alerts")

FILENAME = "alerts-state.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS firing (
    fingerprint TEXT PRIMARY KEY,
    starts_at_s REAL NOT NULL,
    last_sent_s REAL NOT NULL,
    alert TEXT NOT NULL
);
"""


class AlertStateStore:
    """The firing alerts of the last run, in `path`."""

    def __init__(self, path: Path, *, lazy: bool = False) -> None:
        """`lazy`: open at the first load or save, and try again at the next if that fails."""
        self.path = path
        self._lock = threading.Lock()
        self._file = Database(path, _SCHEMA, "alert state", lazy=lazy)

    @property
    def _db(self) -> sqlite3.Connection:
        return self._file.conn

    def load(self) -> list[TrackedAlert]:
        """The saved firing alerts, oldest first."""
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT fingerprint, starts_at_s, last_sent_s, alert FROM firing "
                    "ORDER BY starts_at_s, fingerprint"
                ).fetchall()
            except sqlite3.Error as e:
                raise QueueError(f"{self.path}: cannot read alert state: {e}") from e
        out: list[TrackedAlert] = []
        for fingerprint, starts_at_s, last_sent_s, text in rows:
            try:
                # The JSON holds starts_at to the millisecond; the column holds it exactly.
                alert = replace(Alert.from_dict(json.loads(text)), starts_at_s=float(starts_at_s))
                if alert.fingerprint != fingerprint:
                    raise ValueError(f"labels hash to {alert.fingerprint}")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                log.warning(
                    "skipping an unreadable saved alert",
                    extra={"kv": {"file": str(self.path), "fingerprint": fingerprint,
                                  "error": f"{type(e).__name__}: {e}"}},
                )  # fmt: skip
                continue
            out.append(TrackedAlert(alert, float(last_sent_s)))
        return out

    def save(self, items: Iterable[TrackedAlert]) -> None:
        """Replace the saved set with `items`, atomically."""
        rows = [
            (
                t.alert.fingerprint,
                t.alert.starts_at_s,
                t.last_sent_s,
                json.dumps(t.alert.to_dict(), sort_keys=True, separators=(",", ":")),
            )
            for t in items
        ]
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.execute("DELETE FROM firing")
                    self._db.executemany("INSERT INTO firing VALUES (?, ?, ?, ?)", rows)
                    self._db.execute("COMMIT")
                except sqlite3.Error:
                    if self._db.in_transaction:  # SQLite may have rolled back already
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise QueueError(f"{self.path}: cannot save alert state: {e}") from e

    def close(self) -> None:
        with self._lock:
            self._file.close()
