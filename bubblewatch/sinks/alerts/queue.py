"""A bounded, persistent FIFO of notifications for one receiver, in SQLite.

Why SQLite (stdlib `sqlite3`) rather than an append-only file: each put, ack
and drop is one atomic transaction, so a crash or kill mid-write leaves the
queue as it was before or after, never a torn record; removing the head and
dropping the oldest past the bound are single DELETEs (no compaction pass);
and the dropped count persists next to the items. Alerts are rare (a few per
minute at most), so a synchronous commit per operation costs nothing.

Items leave the queue only when `ack`ed after a successful delivery, so a
restart re-sends the head at worst: at-least-once, in order.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bubblewatch.errors import UnavailableError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    enqueued_at_s REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class QueueError(UnavailableError, RuntimeError):
    """The queue file cannot be opened or written (names the file)."""


@dataclass(frozen=True)
class QueueItem:
    id: int
    enqueued_at_s: float
    attempts: int
    payload: dict[str, Any]


def open_db(path: Path, schema: str, what: str) -> sqlite3.Connection:
    """An autocommit SQLite database in WAL mode with every commit synced, schema applied."""
    db: sqlite3.Connection | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(schema)
    except (OSError, sqlite3.Error) as e:
        if db is not None:
            db.close()
        raise QueueError(f"{path}: cannot open {what}: {e}") from e
    return db


class Database:
    """One SQLite file opened with `open_db`, now or (`lazy`) at first use.

    A lazy open that fails (a full disk, a missing directory) is tried again
    at the next use, so a daemon whose spool is unusable at start keeps running.
    """

    def __init__(self, path: Path, schema: str, what: str, *, lazy: bool) -> None:
        self.path = path
        self._schema = schema
        self._what = what
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        if not lazy:
            self._conn = open_db(path, schema, what)

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection, opening it now if needed (callers hold their lock)."""
        if self._conn is None:
            if self._closed:
                raise QueueError(f"{self.path}: {self._what} is closed")
            self._conn = open_db(self.path, self._schema, self._what)
        return self._conn

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._conn is not None:
                self._conn.close()


class PersistentQueue:
    """FIFO of JSON payloads in `path`, holding at most `max_items` (oldest dropped).

    `lazy=True`: open the file at the first operation, and again after a failed open.
    """

    def __init__(self, path: Path, max_items: int, *, lazy: bool = False) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.path = path
        self.max_items = max_items
        self._lock = threading.Lock()
        self._file = Database(path, _SCHEMA, "alert queue", lazy=lazy)

    @property
    def _db(self) -> sqlite3.Connection:
        return self._file.conn

    def put(self, payload: dict[str, Any], now_s: float) -> int:
        """Append; returns how many old items were dropped to stay within the bound."""
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        with self._lock, self._tx() as db:
            db.execute("INSERT INTO items (enqueued_at_s, payload) VALUES (?, ?)", (now_s, text))
            (n,) = db.execute("SELECT COUNT(*) FROM items").fetchone()
            excess = max(0, int(n) - self.max_items)
            if excess:
                db.execute(
                    "DELETE FROM items WHERE id IN (SELECT id FROM items ORDER BY id LIMIT ?)",
                    (excess,),
                )
                db.execute(
                    "INSERT INTO counters (name, value) VALUES ('dropped', ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                    (excess,),
                )
            return excess

    def head(self, skip: frozenset[int] = frozenset()) -> QueueItem | None:
        """The oldest item whose id is not in `skip`, or None when there is none."""
        where = f"WHERE id NOT IN ({','.join('?' * len(skip))})" if skip else ""
        with self._lock:
            row = self._exec(
                f"SELECT id, enqueued_at_s, attempts, payload FROM items {where} "
                "ORDER BY id LIMIT 1",
                tuple(skip),
            ).fetchone()
        if row is None:
            return None
        return QueueItem(int(row[0]), float(row[1]), int(row[2]), json.loads(row[3]))

    def ack(self, item_id: int) -> None:
        """Remove a delivered item (a no-op if it was dropped meanwhile)."""
        with self._lock:
            self._exec("DELETE FROM items WHERE id = ?", (item_id,))

    def drop(self, item_id: int) -> None:
        """Remove an item the receiver will never accept, counting it as dropped."""
        with self._lock, self._tx() as db:
            cur = db.execute("DELETE FROM items WHERE id = ?", (item_id,))
            if cur.rowcount:
                db.execute(
                    "INSERT INTO counters (name, value) VALUES ('dropped', 1) "
                    "ON CONFLICT(name) DO UPDATE SET value = value + 1"
                )

    def record_attempt(self, item_id: int) -> None:
        with self._lock:
            self._exec("UPDATE items SET attempts = attempts + 1 WHERE id = ?", (item_id,))

    def __len__(self) -> int:
        with self._lock:
            (n,) = self._exec("SELECT COUNT(*) FROM items").fetchone()
        return int(n)

    @property
    def dropped_total(self) -> int:
        """Items dropped over the queue file's lifetime (survives restarts)."""
        with self._lock:
            row = self._exec("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        return 0 if row is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as e:
            raise QueueError(f"{self.path}: alert queue error: {e}") from e

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self.path)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on error, errors naming the file.

    SQLite rolls a transaction back by itself on some errors (SQLITE_FULL at
    COMMIT among them), so the ROLLBACK here runs only while one is open and
    never replaces the error that matters with "no transaction is active".
    """

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self._path = path

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise QueueError(f"{self._path}: alert queue error: {e}") from e
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as e:
                self._rollback()
                raise QueueError(f"{self._path}: alert queue error: {e}") from e
        else:
            self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise QueueError(f"{self._path}: alert queue error: {exc}") from exc

    def _rollback(self) -> None:
        if self._db.in_transaction:
            # On failure the connection is unusable; the next operation says so.
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
