"""Driver heartbeats and the decision mailbox of PostgresStore (DESIGN §13), as a mixin of
the store class (SQLite's are in ``chainlab.store.sqlite.drivers``, memory's in
``chainlab.store.memory``).

Fencing as for events: a heartbeat or an answer reads the run's epoch ``FOR SHARE`` in its
transaction (a ``claim`` takes the row ``FOR UPDATE``), and is refused with StaleEpochError
when the writer's epoch is no longer the run's.

Posting a request sends ``NOTIFY chainlab_requests, '<run_id> <request_id>'`` and answering
one ``NOTIFY chainlab_answers, '<request_id>'`` with the commit, so the driver waiting for
requests (:meth:`PostgresLiveness.wait_for_requests`) and the person waiting for the answer
(:meth:`PostgresLiveness.wait_for_answer`) wake when it is committed, not by polling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

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
from chainlab.store.postgres.errors import PoolTimeout, _server_error
from chainlab.store.postgres.listen import MailListener
from chainlab.store.postgres.pool import lend

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["ANSWERS", "REQUESTS", "PostgresLiveness"]

#: NOTIFY channels: a request was posted (``"<run_id> <request_id>"``), one was answered
REQUESTS = "chainlab_requests"
ANSWERS = "chainlab_answers"


def put_driver(conn: psycopg.Connection, run_id: str, driver: DriverInfo, epoch: int) -> None:
    """Record ``driver`` beating now at ``epoch`` (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO drivers (run_id, driver_id, host, pid, epoch, beat_at) "
        "VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (run_id) DO UPDATE SET "
        "driver_id = excluded.driver_id, host = excluded.host, pid = excluded.pid, "
        "epoch = excluded.epoch, beat_at = excluded.beat_at",
        (run_id, driver.driver_id, driver.host, driver.pid, epoch, time.time()))


class PostgresLiveness:
    """Heartbeats and mailbox of :class:`~chainlab.store.postgres.PostgresStore`."""

    _mail_listener: MailListener | None = None

    if TYPE_CHECKING:
        dsn: str
        where: str
        connect_timeout: float
        _closed: bool
        _pool: ConnectionPool
        _writer_lock: threading.Lock

        def _read(self, fn: Callable[[psycopg.Connection], Any]) -> Any: ...

    def _write(self, fn: Callable[[psycopg.Connection], Any], lost: str) -> Any:
        """``fn(conn)`` in one transaction on a pooled connection; server errors mapped once
        (by the store's own mapping), chainlab's errors raised as they are."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        try:
            with lend(self._pool) as conn, conn.transaction():
                return fn(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise _server_error(exc, self.where, "write to", lost) from exc

    @staticmethod
    def _epoch(conn: psycopg.Connection, run_id: str) -> int:
        row = conn.execute("SELECT epoch FROM runs WHERE run_id = %s FOR SHARE",
                           (run_id,)).fetchone()
        if row is None:
            known = [r[0] for r in conn.execute(
                "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 200").fetchall()]
            raise RunNotFoundError(run_id, known)
        return int(row[0])

    def heartbeat(self, run_id: str, epoch: int, driver: DriverInfo) -> None:
        def beat(conn: psycopg.Connection) -> None:
            current = self._epoch(conn, run_id)
            if current != epoch:
                raise StaleEpochError(run_id, epoch, current)
            put_driver(conn, run_id, driver, epoch)

        self._write(beat, f"the heartbeat of run {run_id!r} was not recorded")

    def driver_of(self, run_id: str) -> DriverInfo | None:
        rows = self._read(lambda c: c.execute(
            "SELECT d.driver_id, d.host, d.pid, d.epoch, d.beat_at, w.name FROM drivers d "
            "LEFT JOIN workers w ON w.worker_id = d.driver_id WHERE d.run_id = %s",
            (run_id,)).fetchall())
        return DriverInfo(*rows[0]) if rows else None

    def clear_driver(self, run_id: str, driver_id: str) -> None:
        self._write(lambda c: c.execute(
            "DELETE FROM drivers WHERE run_id = %s AND driver_id = %s", (run_id, driver_id)),
            f"the driver of run {run_id!r} is still recorded (it goes stale by itself)")

    def post_request(self, run_id: str, request: DecisionRequest) -> int:
        check_request(run_id, request)
        payload = payload_text(request)

        def post(conn: psycopg.Connection) -> int:
            self._epoch(conn, run_id)
            row = conn.execute(
                "INSERT INTO requests (run_id, step_id, action, payload, requested_by, "
                "created_at, expires_at) VALUES (%s,%s,%s,%s,%s,%s,%s) RETURNING request_id",
                (run_id, request.step_id, request.action, payload, request.by,
                 request.created_at or time.time(), request.expires_at)).fetchone()
            assert row is not None
            conn.execute("SELECT pg_notify(%s, %s)", (REQUESTS, f"{run_id} {row[0]}"))
            return int(row[0])

        return int(self._write(post, "the request was not posted"))

    def pending_requests(self, run_id: str, after_id: int = 0) -> list[DecisionRequest]:
        rows = self._read(lambda c: c.execute(
            f"SELECT {REQUEST_COLUMNS} FROM requests WHERE run_id = %s AND request_id > %s "
            "AND outcome IS NULL ORDER BY request_id", (run_id, after_id)).fetchall())
        return [request_from_row(r) for r in rows]

    def answer_request(self, request_id: int, epoch: int, outcome: str, message: str) -> None:
        check_outcome(outcome)
        run_id = self.get_request(request_id).run_id

        def answer(conn: psycopg.Connection) -> None:
            current = self._epoch(conn, run_id)
            if current != epoch:
                raise StaleEpochError(run_id, epoch, current)
            row = conn.execute("SELECT outcome FROM requests WHERE request_id = %s FOR UPDATE",
                               (request_id,)).fetchone()
            if row is not None and row[0] is not None:
                raise answered_twice(request_id, row[0])
            conn.execute("UPDATE requests SET outcome = %s, message = %s, answered_at = %s, "
                         "answered_epoch = %s WHERE request_id = %s",
                         (outcome, message, time.time(), epoch, request_id))
            conn.execute("SELECT pg_notify(%s, %s)", (ANSWERS, str(request_id)))

        self._write(answer, f"decision request {request_id} was not answered")

    def get_request(self, request_id: int) -> DecisionRequest:
        rows = self._read(lambda c: c.execute(
            f"SELECT {REQUEST_COLUMNS} FROM requests WHERE request_id = %s",
            (request_id,)).fetchall())
        if not rows:
            raise unknown_request(request_id)
        return request_from_row(rows[0])

    # ------------------------------------------------------------------ waiting
    def _mail(self) -> MailListener | None:
        """The running listener, or None after starting one (the caller reads first)."""
        if self._mail_listener is not None:
            return self._mail_listener
        with self._writer_lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            if self._mail_listener is None:
                listener = MailListener(self.dsn, self.connect_timeout, REQUESTS, ANSWERS)
                listener.start()
                listener.ready.wait(self.connect_timeout)
                self._mail_listener = listener
        return None

    def wait_for_requests(self, run_id: str, after_id: int, timeout: float) -> bool:
        """Block until a request of ``run_id`` after ``after_id`` may have been posted (a
        NOTIFY said so) or ``timeout`` passed; True when woken. The first call only starts
        listening (returns True at once): read the mailbox after it."""
        listener = self._mail()
        return True if listener is None else listener.wait(
            lambda: listener.heads.get(run_id, 0) > after_id, timeout)

    def wait_for_answer(self, request_id: int, timeout: float) -> bool:
        """Block until request ``request_id`` may have been answered or ``timeout`` passed
        (the first call only starts listening, as :meth:`wait_for_requests`)."""
        listener = self._mail()
        return True if listener is None else listener.wait(
            lambda: request_id in listener.answered, timeout)

    def _stop_mail_listener(self) -> None:
        if self._mail_listener is not None:
            self._mail_listener.stop()
