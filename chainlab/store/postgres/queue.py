"""The queue of :class:`~chainlab.store.postgres.PostgresStore` (DESIGN §19): the shared SQL
(:class:`~chainlab.store.sql_queue.SqlQueue`) in one transaction per claim on a pooled
connection: the candidate run is taken ``FOR UPDATE SKIP LOCKED`` (no claimant waits for a
row another one is taking) and a limit or a key is counted again under
``pg_advisory_xact_lock`` of that queue or key (two claimants never spend one slot)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from chainlab.errors import RunNotFoundError, StoreError
from chainlab.store._writer import record_of, run_select
from chainlab.store.base import DriverInfo, RunRecord
from chainlab.store.postgres.drivers import put_driver
from chainlab.store.postgres.errors import PoolTimeout, _server_error
from chainlab.store.postgres.pool import lend
from chainlab.store.queue import WorkerInfo
from chainlab.store.sql_queue import SqlQueue, Tx

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresQueue"]

_RUNS = run_select("postgres")

#: the advisory-lock namespace of claims (the first key of the two-key lock)
_CLAIM_LOCKS = 0x636C61  # "cla"


class _PostgresTx:
    """A :class:`~chainlab.store.sql_queue.Tx` on a connection in a transaction."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self.conn.execute(sql, tuple(params)).fetchone()
        return None if row is None else tuple(row)

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(sql, tuple(params))

    def lock(self, name: str) -> None:
        self.conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                          (_CLAIM_LOCKS, name))

    def record(self, run_id: str) -> RunRecord:
        row = self.conn.execute(f"SELECT {_RUNS} WHERE runs.run_id = %s",
                                (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return record_of(row)

    def put_driver(self, run_id: str, worker: WorkerInfo, epoch: int) -> None:
        put_driver(self.conn, run_id, DriverInfo(worker.worker_id, worker.host, worker.pid),
                   epoch)


class PostgresQueue(SqlQueue):
    """Queue limits, workers and the claim of PostgresStore (tables of migration 4)."""

    _queue_dialect = "postgres"

    if TYPE_CHECKING:
        where: str
        _closed: bool
        _pool: ConnectionPool
        _writer_lock: threading.Lock

        def _read(self, fn: Any) -> Any: ...

    @contextlib.contextmanager
    def _queue_tx(self) -> Iterator[Tx]:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        try:
            with lend(self._pool) as conn, conn.transaction():
                yield _PostgresTx(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise _server_error(exc, self.where, "write to", "the queue was not changed"
                                ) from exc

    def _queue_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._read(lambda c: c.execute(sql, tuple(params))
                                             .fetchall())]
