"""The SQLite store's side of the group-commit writer thread (:mod:`chainlab.store._writer`):
open the thread's connection, and commit each batch of appends in one ``BEGIN IMMEDIATE``
transaction, refusing what a stale epoch wrote and mapping SQLite's errors to the store's."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

from chainlab.errors import StoreError
from chainlab.events.event import Event
from chainlab.store._writer import Append, GroupCommitWriter, sort_batch

if TYPE_CHECKING:
    from chainlab.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteWriter"]


class SQLiteWriter:
    """What the writer thread does with SQLite: open its connection, commit each batch."""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.conn: sqlite3.Connection | None = None
        self.broken: Exception | None = None
        self.thread = GroupCommitWriter("chainlab-sqlite-writer", self.commit_batch,
                                        start=self.open, failed=store._failed)

    def open(self) -> None:
        store = self.store
        try:
            if store._shared is not None:
                self.conn = store._shared
            else:
                self.conn = store._open()
                self.conn.execute(f"PRAGMA synchronous = {store.synchronous}")
        except Exception as exc:
            self.broken = exc

    def commit_batch(self, appends: list[Append]) -> None:
        store = self.store
        if self.conn is None or self.broken is not None:
            for item in appends:
                store._failed.setdefault((item[1], item[2]), self._cannot_open(
                    self.broken, item[1], item[3]))
        else:
            with store._lock:
                self._commit(self.conn, appends)

    def _cannot_open(self, exc: Exception | None, run_id: str,
                     events: tuple[Event, ...]) -> StoreError:
        store = self.store
        if isinstance(exc, sqlite3.Error):
            fault = store._translate(exc, store._lost(run_id, events[0].seq if events else None))
            if fault is not None:
                return fault
        return StoreError(f"cannot open {store.path} for writing: {exc}")

    def _commit(self, conn: sqlite3.Connection, appends: list[Append]) -> None:
        """Commit every acceptable append in one transaction; record refused writers."""
        store = self.store
        stale, failed = store._stale, store._failed
        if not store._file_ok() or store._corrupt is not None:  # gone or damaged: no writes
            for _, run_id, epoch, events, _ in appends:
                refused = store._refusal(run_id, events[0].seq if events else None)
                if refused is not None and (run_id, epoch) not in stale:
                    failed.setdefault((run_id, epoch), refused)
            return
        written: dict[tuple[str, int], int | None] = {}  # -> first seq in this batch
        try:
            conn.execute("BEGIN IMMEDIATE")

            epochs: dict[str, int | None] = {}

            def epoch_of(run_id: str) -> int | None:  # read once per run and batch
                if run_id not in epochs:
                    row = conn.execute("SELECT epoch FROM runs WHERE run_id = ?",
                                       (run_id,)).fetchone()
                    epochs[run_id] = None if row is None else int(row[0])
                return epochs[run_id]

            rows, runs = sort_batch(appends, epoch_of, stale, failed, written)
            conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", rows)
            for run_id, (status, ts) in runs.items():
                if status is not None:  # else updated_at is read from the last event
                    conn.execute("UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ?",
                                 (status, ts, run_id))
            conn.execute("COMMIT")
        except Exception as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            error = StoreError(f"could not commit {len(appends)} event batch(es) to "
                               f"{store.path}: {exc}")
            for key, first in written.items():
                fault = store._translate(exc, store._lost(key[0], first)) if isinstance(
                    exc, sqlite3.Error) else None
                failed.setdefault(key, fault or error)
            return
        saved = store._saved
        for row in rows:  # in seq order: the last one of each run stays
            saved[row[0]] = row[1]
