"""Driver heartbeats and the decision mailbox of :class:`~chainlab.store.sqlite.SQLiteStore`
(DESIGN §13): the :class:`~chainlab.store.base.Drivers` and
:class:`~chainlab.store.base.Mailbox` protocols, as a mixin of the store class, so the store's
own module keeps its one concern (the event log).

Both writes that a driver makes here are fenced like its events: a heartbeat or an answer
from an epoch that is no longer the run's is refused with StaleEpochError, so a driver that
was taken over learns it at its next beat and can never answer a request.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from chainlab.errors import RunNotFoundError, StaleEpochError, StoreError
from chainlab.store.base import (
    REQUEST_COLUMNS,
    DecisionRequest,
    DriverInfo,
    answered_twice,
    check_outcome,
    check_request,
    payload_text,
    request_from_row,
    unknown_request,
)

__all__ = ["SQLiteLiveness"]


class SQLiteLiveness:
    """Heartbeats and mailbox of :class:`~chainlab.store.sqlite.SQLiteStore` (tables
    ``drivers`` and ``requests``, migration 3). Each write is one short ``BEGIN IMMEDIATE``
    transaction on the caller's connection, beside the store's group-commit writer."""

    if TYPE_CHECKING:
        _lock: contextlib.AbstractContextManager[Any]

        def _conn(self) -> sqlite3.Connection: ...
        def _fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]: ...
        def _refusal(self, run_id: str | None, first_unsaved: int | None = None
                     ) -> StoreError | None: ...
        def _run_ids(self, conn: sqlite3.Connection) -> list[str]: ...
        def _sqlite_errors(self, doing: str, run_id: str | None = None
                           ) -> contextlib.AbstractContextManager[None]: ...

    @contextlib.contextmanager
    def _write(self, run_id: str | None) -> Iterator[sqlite3.Connection]:
        """One write transaction (rolled back on any error), errors mapped once; ``run_id``
        is the run it writes (None: the queue's tables), named when it fails."""
        refused = self._refusal(run_id)
        if refused is not None:
            raise refused
        with self._lock, self._sqlite_errors("write to", run_id):
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise

    def _epoch(self, conn: sqlite3.Connection, run_id: str) -> int:
        row = conn.execute("SELECT epoch FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id, self._run_ids(conn))
        return int(row[0])

    def heartbeat(self, run_id: str, epoch: int, driver: DriverInfo) -> None:
        with self._write(run_id) as conn:
            current = self._epoch(conn, run_id)
            if current != epoch:
                raise StaleEpochError(run_id, epoch, current)
            self._put_driver(conn, run_id, driver, epoch)

    @staticmethod
    def _put_driver(conn: sqlite3.Connection, run_id: str, driver: DriverInfo,
                    epoch: int) -> None:
        """Record ``driver`` beating now at ``epoch`` (inside the caller's transaction)."""
        conn.execute(
            "INSERT INTO drivers (run_id, driver_id, host, pid, epoch, beat_at) "
            "VALUES (?,?,?,?,?,?) ON CONFLICT (run_id) DO UPDATE SET "
            "driver_id = excluded.driver_id, host = excluded.host, pid = excluded.pid, "
            "epoch = excluded.epoch, beat_at = excluded.beat_at",
            (run_id, driver.driver_id, driver.host, driver.pid, epoch, time.time()))

    def driver_of(self, run_id: str) -> DriverInfo | None:
        rows = self._fetch("SELECT d.driver_id, d.host, d.pid, d.epoch, d.beat_at, w.name "
                           "FROM drivers d LEFT JOIN workers w ON w.worker_id = d.driver_id "
                           "WHERE d.run_id = ?", (run_id,))
        return DriverInfo(*rows[0]) if rows else None

    def clear_driver(self, run_id: str, driver_id: str) -> None:
        with self._write(run_id) as conn:
            conn.execute("DELETE FROM drivers WHERE run_id = ? AND driver_id = ?",
                         (run_id, driver_id))

    def post_request(self, run_id: str, request: DecisionRequest) -> int:
        check_request(run_id, request)
        payload = payload_text(request)
        with self._write(run_id) as conn:
            self._epoch(conn, run_id)
            cur = conn.execute(
                "INSERT INTO requests (run_id, step_id, action, payload, requested_by, "
                "created_at, expires_at) VALUES (?,?,?,?,?,?,?)",
                (run_id, request.step_id, request.action, payload, request.by,
                 request.created_at or time.time(), request.expires_at))
            return int(cur.lastrowid or 0)

    def pending_requests(self, run_id: str, after_id: int = 0) -> list[DecisionRequest]:
        rows = self._fetch(f"SELECT {REQUEST_COLUMNS} FROM requests WHERE run_id = ? AND "
                           "request_id > ? AND outcome IS NULL ORDER BY request_id",
                           (run_id, after_id))
        return [request_from_row(r) for r in rows]

    def answer_request(self, request_id: int, epoch: int, outcome: str, message: str) -> None:
        check_outcome(outcome)
        found = self.get_request(request_id)
        with self._write(found.run_id) as conn:
            current = self._epoch(conn, found.run_id)
            if current != epoch:
                raise StaleEpochError(found.run_id, epoch, current)
            row = conn.execute("SELECT outcome FROM requests WHERE request_id = ?",
                               (request_id,)).fetchone()
            if row[0] is not None:
                raise answered_twice(request_id, row[0])
            conn.execute("UPDATE requests SET outcome = ?, message = ?, answered_at = ?, "
                         "answered_epoch = ? WHERE request_id = ?",
                         (outcome, message, time.time(), epoch, request_id))

    def get_request(self, request_id: int) -> DecisionRequest:
        rows = self._fetch(f"SELECT {REQUEST_COLUMNS} FROM requests WHERE request_id = ?",
                           (request_id,))
        if not rows:
            raise unknown_request(request_id)
        return request_from_row(rows[0])
