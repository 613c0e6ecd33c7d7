"""PostgreSQL store (``postgresql://...``): runs shared by processes and machines.

The same design as SQLiteStore, on a server:

* Every ``append`` goes to one writer thread per store that commits whatever has queued up
  in one transaction (group commit) on a connection of its own; ``await flush()`` is the
  durability barrier.
* Fencing: each transaction reads the epochs of the runs it writes ``FOR SHARE`` (so a
  ``claim``, which takes the row ``FOR UPDATE``, waits for it or it for the claim) and
  writes only the events of writers whose epoch is current; a stale writer's events are
  not written (nothing of it is committed) and its ``flush`` raises StaleEpochError from
  then on. ``claim`` is a compare-and-swap of the epoch (with ``expected_seq``, also of the
  last committed event) in one transaction.
* The append transaction also sends ``NOTIFY chainlab_events, '<run_id> <last seq>'``, so
  a watcher in another process (:meth:`PostgresStore.wait_for_events`, used by
  ``Runtime.watch``) wakes when the events are committed, not before.
* Reads (and the short writes that are not the event log's: a run's creation, a claim,
  heartbeats, the mailbox, the queue) use a connection pool (psycopg_pool) through
  :func:`~chainlab.store.postgres.pool.lend`, which checks a connection before use: after
  a server restart no call meets a dropped one. A read on a connection the server drops
  while it runs is tried once more (reads change nothing); a write is never retried.
* ``MIGRATIONS`` (``postgres_schema``) is append-only; ``chainlab_schema_version`` records
  how far a database is migrated; a newer one is refused.
* psycopg's errors become chainlab's in ONE place, :func:`_server_error`: StoreServerError
  naming the server and database (never the password), the cause and the fix.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from chainlab.errors import (
    MissingExtraError,
    RunExistsError,
    RunNotFoundError,
    StaleEpochError,
    StoreError,
    StoreServerError,
)
from chainlab.events.event import Event, event_kind
from chainlab.store._writer import GroupCommitWriter, WriterStore
from chainlab.store.base import DriverInfo, RunRecord, check_run_id
from chainlab.store.postgres.batch import BATCH, batch_parameters
from chainlab.store.postgres.drivers import PostgresLiveness, put_driver
from chainlab.store.postgres.errors import _dropped, _retryable, _server_error
from chainlab.store.postgres.listen import CHANNEL, EventListener, PostgresWatching
from chainlab.store.postgres.pool import lend, make_pool
from chainlab.store.postgres.queue import PostgresQueue
from chainlab.store.postgres.schema import MIGRATIONS, migrate
from chainlab.store.sql_experiments import SqlExperiments, listing
from chainlab.store.sql_rows import (
    Append,
    event_rows,
    insert_run,
    not_text,
    offer,
    record_of,
    run_select,
    settle,
)

try:
    import psycopg
    from psycopg import conninfo as _conninfo
    from psycopg_pool import PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(exc.name or "psycopg", "postgres", "PostgresStore") from exc

__all__ = ["CHANNEL", "PostgresStore"]

_RETRIES = 3  # a batch that met a deadlock or a serialization failure is tried again
_RUN_COLUMNS = run_select("postgres")


class PostgresStore(PostgresWatching, PostgresQueue, SqlExperiments, PostgresLiveness,
                    WriterStore):
    """Runs and events in a PostgreSQL database, e.g.
    ``PostgresStore("postgresql://user:pw@host/db")`` or a libpq conninfo string
    (``"host=/run/postgresql dbname=chainlab"``).

    The database must exist; its tables are created (migrated) on first use. Blocking
    reads may be called from any thread (the runtime calls them from worker threads).

    Raises StoreServerError when the server cannot be used (unreachable, credentials
    refused, no such database, a newer schema, a dropped connection), naming the fix.
    """

    blocking = True

    def __init__(self, dsn: str, *, pool_size: int = 4, connect_timeout: float = 10.0):
        self.dsn = dsn
        self.where = describe(dsn)
        self.connect_timeout = connect_timeout
        self._init_writes()
        self._listener: EventListener | None = None
        with self._connect("open") as conn:
            with self._errors("migrate"):
                found = migrate(conn)
            if found > len(MIGRATIONS):
                raise StoreServerError(
                    self.where, "newer_schema", f"{self.where} has chainlab schema version "
                    f"{found}, newer than this chainlab understands ({len(MIGRATIONS)})",
                    "upgrade chainlab (pip install -U chainlab) in every process using it")
        self._pool = make_pool(dsn, pool_size, connect_timeout)
        # a store nobody closed: close its pool at exit, from the main thread (left to the
        # pool's __del__, a collection in one of its own threads fails to join that thread)
        weakref.finalize(self, self._pool.close)

    # ------------------------------------------------------------------ connections
    @contextlib.contextmanager
    def _errors(self, doing: str, lost: str | None = None) -> Iterator[None]:
        """psycopg errors of the caller become StoreServerError (see :func:`_server_error`)."""
        try:
            yield
        except (psycopg.Error, PoolTimeout) as exc:
            raise _server_error(exc, self.where, doing, lost) from exc

    def _connect(self, doing: str) -> psycopg.Connection:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        with self._errors(doing):
            return psycopg.connect(self.dsn, autocommit=True,
                                   connect_timeout=max(1, int(self.connect_timeout)))

    def _read(self, fn: Callable[[psycopg.Connection], Any]) -> Any:
        """``fn(conn)`` on a pooled connection; once more on a fresh one if the server
        dropped the first (a read changes nothing, so trying again is safe)."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        for tries_left in (1, 0):
            try:
                with lend(self._pool) as conn:
                    return fn(conn)
            except psycopg.OperationalError as exc:
                if tries_left and _dropped(exc) and not isinstance(exc, PoolTimeout):
                    continue
                raise _server_error(exc, self.where, "read from") from exc
            except (psycopg.Error, PoolTimeout) as exc:
                raise _server_error(exc, self.where, "read from") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def schema_version(self) -> int:
        """How far this database is migrated (``len(MIGRATIONS)`` once opened)."""
        rows = self.query("SELECT max(version) FROM chainlab_schema_version")
        return int(rows[0][0])

    # ------------------------------------------------------------------ runs
    def create_run(self, record: RunRecord, driver: DriverInfo | None = None,
                   events: Sequence[Event] = (), key: str | None = None) -> None:
        check_run_id(record.run_id)
        rows = event_rows(tuple(events))
        if isinstance(rows, StoreError):
            raise rows
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        try:
            with lend(self._pool) as conn, conn.transaction():
                insert_run(conn, record, key, "%s")
                if driver is not None:
                    put_driver(conn, record.run_id, driver, record.epoch)
                if rows:
                    with conn.cursor() as cur:
                        cur.executemany("INSERT INTO events VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                                        rows)
                    conn.execute("SELECT pg_notify(%s, %s)",
                                 (CHANNEL, f"{record.run_id} {events[-1].seq}"))
        except psycopg.errors.UniqueViolation:
            found = self.run_for_key(key) if key is not None else None
            raise (RunExistsError(found, key) if found is not None
                   else RunExistsError(record.run_id)) from None
        except UnicodeEncodeError as exc:
            raise not_text(record.run_id, exc) from None
        except (psycopg.Error, PoolTimeout) as exc:
            if isinstance(exc.__cause__, UnicodeEncodeError):
                raise not_text(record.run_id, exc.__cause__) from None
            raise _server_error(exc, self.where, "write to",
                                f"run {record.run_id!r} was not created") from exc
        if events:
            self._saved[record.run_id] = events[-1].seq

    def run_for_key(self, key: str) -> str | None:
        rows = self._read(lambda c: c.execute(
            "SELECT run_id FROM run_keys WHERE idempotency_key = %s", (key,)).fetchall())
        return rows[0][0] if rows else None

    def claim(self, run_id: str, expected_epoch: int, expected_seq: int | None = None,
              driver: DriverInfo | None = None) -> int:
        def cas(conn: psycopg.Connection) -> None:
            with conn.transaction():
                row = conn.execute("SELECT epoch FROM runs WHERE run_id = %s FOR UPDATE",
                                   (run_id,)).fetchone()
                if row is None:
                    raise RunNotFoundError(run_id, _run_ids(conn))
                if row[0] != expected_epoch:
                    raise StaleEpochError(run_id, expected_epoch, row[0])
                if expected_seq is not None:
                    last = conn.execute("SELECT coalesce(max(seq), 0) FROM events WHERE "
                                        "run_id = %s", (run_id,)).fetchone()
                    last_seq = int(last[0]) if last else 0
                    if last_seq != expected_seq:
                        raise StaleEpochError(run_id, expected_epoch, row[0],
                                              moved_on=(expected_seq, last_seq))
                conn.execute("UPDATE runs SET epoch = %s, updated_at = %s WHERE run_id = %s",
                             (expected_epoch + 1, time.time(), run_id))
                if driver is not None:
                    put_driver(conn, run_id, driver, expected_epoch + 1)

        if self._closed:
            raise StoreError(f"{self!r} is closed")
        try:
            with lend(self._pool) as conn:
                cas(conn)
        except (psycopg.Error, PoolTimeout) as exc:  # the claim may not have committed
            raise _server_error(exc, self.where, "claim a run in",
                                f"run {run_id!r} may or may not be claimed: read it again"
                                ) from exc
        return expected_epoch + 1

    def get_run(self, run_id: str) -> RunRecord:
        def read(conn: psycopg.Connection) -> RunRecord:
            row = conn.execute(f"SELECT {_RUN_COLUMNS} WHERE runs.run_id = %s",
                               (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(run_id, _run_ids(conn))
            return record_of(row)

        return self._read(read)  # type: ignore[no-any-return]

    def list_runs(self, limit: int | None = None, *,
                  experiment: str | None = None) -> list[RunRecord]:
        where, params = listing("postgres", experiment)
        sql = f"SELECT {_RUN_COLUMNS}{where} ORDER BY created_at DESC, runs.run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self._read(lambda c: [record_of(r) for r in c.execute(sql, params).fetchall()])  # type: ignore[no-any-return]

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        def read(conn: psycopg.Connection) -> list[Event]:
            rows = conn.execute(
                "SELECT run_id, seq, ts, epoch, kind, step_id, attempt, payload FROM events "
                "WHERE run_id = %s AND seq > %s ORDER BY seq", (run_id, after_seq)).fetchall()
            if not rows and conn.execute("SELECT 1 FROM runs WHERE run_id = %s",
                                         (run_id,)).fetchone() is None:
                raise RunNotFoundError(run_id, _run_ids(conn))
            return [Event(r[0], r[1], r[2], r[3], event_kind(r[4]), r[5], r[6],
                          json.loads(r[7])) for r in rows]

        return self._read(read)  # type: ignore[no-any-return]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL query (``%s`` placeholders)."""
        return self._read(lambda c: c.execute(sql, params).fetchall())  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ writes
    def _new_writer(self) -> GroupCommitWriter:
        return _PostgresWriter(self).thread

    def close(self) -> None:
        """Commit what is queued, stop the threads and close every connection."""
        if not self._stop_writer():
            return
        if self._listener is not None:
            self._listener.stop()
        self._stop_mail_listener()
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

class _PostgresWriter:
    """What the writer thread does with PostgreSQL: one connection of its own (reconnected
    after a drop), each batch one pipelined transaction, retried when the server says so."""

    def __init__(self, store: PostgresStore):
        self.store = store
        self.conn: psycopg.Connection | None = None
        self.thread = GroupCommitWriter("chainlab-postgres-writer", self._commit,
                                        finish=self._close, failed=store._failed)

    def _close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()

    def _connection(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            store = self.store
            self.conn = psycopg.connect(store.dsn, autocommit=True,
                                        connect_timeout=max(1, int(store.connect_timeout)))
        return self.conn

    def _commit(self, appends: list[Append]) -> None:
        """Commit every acceptable append in one transaction; record refused writers."""
        store = self.store
        for attempt in range(_RETRIES):
            written: dict[tuple[str, int], int | None] = {}  # -> first seq in this batch
            try:
                rows = self._transaction(self._connection(), appends, written)
            except psycopg.Error as exc:
                if attempt + 1 < _RETRIES and _retryable(exc):
                    continue
                self._fail(appends, written, exc)
                return
            for row in rows:  # in seq order: the last one of each run stays
                store._saved[row[0]] = row[1]
            return

    def _fail(self, appends: list[Append], written: dict[tuple[str, int], int | None],
              exc: psycopg.Error) -> None:
        """Nothing of this batch is durable: every writer in it fails from now on (a later
        flush must never report events after a lost one as durable)."""
        store = self.store
        if not written:  # the connection failed before the batch was sorted out
            written = {(item[1], item[2]): (item[3][0].seq if item[3] else None)
                       for item in appends if (item[1], item[2]) not in store._stale}
        if self.conn is not None and self.conn.broken:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None  # the next batch connects again
        for key, first in written.items():
            error = _server_error(exc, store.where, "commit to", store._lost(key[0], first))
            error.__cause__ = exc
            store._failed.setdefault(key, error)

    def _transaction(self, conn: psycopg.Connection, appends: list[Append],
                     written: dict[tuple[str, int], int | None]) -> list[tuple[Any, ...]]:
        """ONE statement (:mod:`.batch`), in its own transaction: one round trip and one
        server wake-up per batch (two before: the epochs read, then the writes; measured 1.3x
        the raw INSERT + COMMIT floor against 2x). The rows of every writer not refused
        already go; the server keeps those whose writer holds its run's epoch, read ``FOR
        SHARE``; the epochs it returns sort the batch out here the same way
        (:func:`~chainlab.store._writer.settle`)."""
        store = self.store
        stale, failed = store._stale, store._failed
        offered = offer(appends, stale, failed)
        if not offered:
            return []
        epochs: dict[str, int] = dict(conn.execute(  # type: ignore[arg-type]
            BATCH, batch_parameters(offered)).fetchall())
        rows, _ = settle(offered, epochs.get, stale, failed, written)
        return rows


# ---------------------------------------------------------------------- helpers
def _run_ids(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 200").fetchall()]


def describe(dsn: str) -> str:
    """``database 'x' on host:port as user`` for messages: never the password."""
    try:
        info = _conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "the PostgreSQL server (unparsable connection string)"
    host = str(info.get("host") or "the default socket")
    port = info.get("port")
    where = f"{host}:{port}" if port else host
    user = f" as {info['user']}" if info.get("user") else ""
    return f"database {str(info.get('dbname') or '(default)')!r} on {where}{user}"
