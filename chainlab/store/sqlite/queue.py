"""The queue of :class:`~chainlab.store.sqlite.SQLiteStore` (DESIGN §19): the shared SQL
(:class:`~chainlab.store.sql_queue.SqlQueue`) over one ``BEGIN IMMEDIATE`` transaction per
claim, so several worker processes on one host claim from one file one at a time."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from chainlab.errors import RunNotFoundError
from chainlab.store.base import DriverInfo, RunRecord
from chainlab.store.queue import WorkerInfo
from chainlab.store.sql_queue import SqlQueue, Tx
from chainlab.store.sql_rows import record_of, run_select
from chainlab.store.sqlite.drivers import SQLiteLiveness

__all__ = ["SQLiteQueue"]

_RUNS = run_select("sqlite")


class _SQLiteTx:
    """A :class:`~chainlab.store.sql_queue.Tx` on a connection in a write transaction."""

    def __init__(self, store: SQLiteQueue, conn: sqlite3.Connection):
        self.store = store
        self.conn = conn

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self.conn.execute(sql.replace("%s", "?"), tuple(params)).fetchone()
        return None if row is None else tuple(row)

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(sql.replace("%s", "?"), tuple(params))

    def lock(self, name: str) -> None:
        """Nothing: a ``BEGIN IMMEDIATE`` transaction is the only writer already."""

    def record(self, run_id: str) -> RunRecord:
        row = self.conn.execute(f"SELECT {_RUNS} WHERE runs.run_id = ?",
                                (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return record_of(row)

    def put_driver(self, run_id: str, worker: WorkerInfo, epoch: int) -> None:
        self.store._put_driver(self.conn, run_id,
                               DriverInfo(worker.worker_id, worker.host, worker.pid), epoch)


class SQLiteQueue(SqlQueue, SQLiteLiveness):
    """Queue limits, workers and the claim of SQLiteStore (tables of migration 5), over the
    write transaction of its liveness half."""

    _queue_dialect = "sqlite"

    @contextlib.contextmanager
    def _queue_tx(self) -> Iterator[Tx]:
        with self._write(None) as conn:
            yield _SQLiteTx(self, conn)

    def _queue_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._fetch(sql.replace("%s", "?"), tuple(params))]
