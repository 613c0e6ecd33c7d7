"""SQLite store (the default): WAL, one writer thread with group commit, epoch fencing.

* Every ``append`` goes to a single writer thread that commits whatever has queued up in one
  transaction (group commit): the event loop never touches sqlite for writes, and a burst of
  events costs one commit. ``await flush()`` is the durability barrier the runtime takes
  before side-effecting calls and when a run stops or suspends.
* Each transaction checks the run's epoch; a write from a stale epoch is refused (nothing of
  it is committed) and the next ``flush`` of that writer raises StaleEpochError.
* ``MIGRATIONS`` is append-only; ``schema_version`` records how far a file is migrated.
* ``attempts`` and ``step_runs`` are SQL views over ``events`` (the event log is the source
  of truth), so ``sqlite3 .chainlab/chainlab.db 'select * from attempts'`` works.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from chainlab.errors import RunNotFoundError, StaleEpochError, StoreError
from chainlab.store.base import Event, RunRecord

__all__ = ["DEFAULT_PATH", "MIGRATIONS", "SQLiteStore"]

DEFAULT_PATH = Path(".chainlab") / "chainlab.db"

_CALL_ENDS = ("'step_succeeded','step_failed','step_retry_scheduled','step_in_doubt',"
              "'step_timed_out','step_cancelled','step_ready'")

MIGRATIONS: list[str] = [
    # 1: runs and their event log; attempts and step states are views over the log
    f"""
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        chain_name TEXT NOT NULL,
        status TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        chain TEXT NOT NULL,
        chains TEXT NOT NULL DEFAULT '{{}}',
        context TEXT NOT NULL DEFAULT '{{}}',
        options TEXT NOT NULL DEFAULT '{{}}',
        meta TEXT NOT NULL DEFAULT '{{}}'
    );
    CREATE INDEX runs_created ON runs(created_at);
    CREATE TABLE events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        ts REAL NOT NULL,
        epoch INTEGER NOT NULL,
        kind TEXT NOT NULL,
        step_id TEXT,
        attempt INTEGER,
        payload TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX events_step ON events(run_id, step_id, attempt, seq);
    CREATE VIEW attempts AS
    SELECT s.run_id, s.step_id, s.attempt,
           CASE s.kind WHEN 'step_started' THEN 'call' ELSE 'compensation' END AS kind,
           s.epoch, json_extract(s.payload, '$.tool') AS tool,
           s.ts AS started_at, e.ts AS ended_at,
           CASE WHEN e.kind IS NULL THEN 'running'
                WHEN e.kind IN ('step_succeeded', 'compensation_succeeded') THEN 'succeeded'
                WHEN e.kind = 'step_timed_out' THEN 'timed_out'
                WHEN e.kind = 'step_cancelled' THEN 'cancelled'
                WHEN e.kind = 'step_ready' THEN 'interrupted'
                WHEN json_extract(e.payload, '$.reason') = 'interrupted' THEN 'interrupted'
                WHEN json_extract(e.payload, '$.error_kind') = 'interrupted' THEN 'interrupted'
                WHEN json_extract(e.payload, '$.error_kind') = 'timeout' THEN 'timed_out'
                ELSE 'failed' END AS status,
           json_extract(e.payload, '$.error_kind') AS error_kind,
           json_extract(e.payload, '$.error') AS error,
           json_extract(s.payload, '$.idempotency_key') AS idempotency_key
    FROM events s
    LEFT JOIN events e ON e.run_id = s.run_id AND e.seq = (
        SELECT min(x.seq) FROM events x
        WHERE x.run_id = s.run_id AND x.step_id = s.step_id AND x.attempt = s.attempt
          AND x.seq > s.seq
          AND ((s.kind = 'step_started' AND x.kind IN ({_CALL_ENDS}))
            OR (s.kind = 'compensation_started'
                AND x.kind IN ('compensation_succeeded', 'compensation_failed'))))
    WHERE s.kind IN ('step_started', 'compensation_started');
    CREATE VIEW step_runs AS
    SELECT e.run_id, e.step_id,
           CASE e.kind
             WHEN 'step_ready' THEN 'ready' WHEN 'step_started' THEN 'running'
             WHEN 'step_succeeded' THEN 'succeeded' WHEN 'step_failed' THEN 'failed'
             WHEN 'step_retry_scheduled' THEN 'retry_wait'
             WHEN 'step_waiting_confirmation' THEN 'waiting_confirmation'
             WHEN 'step_approved' THEN 'ready' WHEN 'step_rejected' THEN 'rejected'
             WHEN 'step_skipped' THEN 'skipped' WHEN 'step_in_doubt' THEN 'in_doubt'
             WHEN 'step_cancelled' THEN 'cancelled'
             WHEN 'compensation_started' THEN 'compensating'
             WHEN 'compensation_succeeded' THEN 'compensated'
             WHEN 'compensation_failed' THEN
               CASE WHEN json_extract(e.payload, '$.will_retry') THEN 'compensating'
                    ELSE 'compensation_failed' END
           END AS status,
           e.seq AS last_seq, e.ts AS updated_at
    FROM events e
    WHERE e.step_id IS NOT NULL AND e.seq = (
        SELECT max(x.seq) FROM events x
        WHERE x.run_id = e.run_id AND x.step_id = e.step_id AND x.kind != 'step_timed_out');
    """,
]


def _connect(target: str, uri: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False,
                           timeout=30.0)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


class SQLiteStore:
    """Runs and events in a SQLite file (``.chainlab/chainlab.db`` by default).

    ``synchronous`` is SQLite's durability setting: ``"full"`` (default) survives power loss,
    ``"normal"`` survives a crash of the process (faster commits in WAL mode).
    """

    blocking = True

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *,
                 synchronous: str = "full"):
        if synchronous.lower() not in ("full", "normal", "off"):
            raise ValueError(f"synchronous must be 'full', 'normal' or 'off', got {synchronous!r}")
        self.synchronous = synchronous.upper()
        if str(path) == ":memory:":
            self.path = ":memory:"
            self._target, self._uri = f"file:chainlab-{uuid.uuid4().hex}?mode=memory&cache=shared", True
        else:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            self.path = str(p)
            self._target, self._uri = str(p), False
        self._local = threading.local()
        self._keepalive = _connect(self._target, self._uri)  # keeps a :memory: db alive
        self._migrate(self._keepalive)
        self._stale: set[tuple[str, int]] = set()
        self._writer: _Writer | None = None
        self._writer_lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ schema
    def _migrate(self, conn: sqlite3.Connection) -> None:
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] or 0
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"{self.path} has schema version {current}, newer than this chainlab "
                    f"understands ({len(MIGRATIONS)}); upgrade chainlab"
                )
            for version in range(current + 1, len(MIGRATIONS) + 1):
                for statement in _split_sql(MIGRATIONS[version - 1]):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @property
    def schema_version(self) -> int:
        return int(self._read().execute("SELECT max(version) FROM schema_version").fetchone()[0])

    def _read(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self._target, self._uri)
        return conn

    # ------------------------------------------------------------------ runs
    def create_run(self, record: RunRecord) -> None:
        conn = self._read()
        try:
            conn.execute(
                "INSERT INTO runs (run_id, chain_name, status, epoch, created_at, updated_at, "
                "chain, chains, context, options, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (record.run_id, record.chain_name, record.status, record.epoch,
                 record.created_at, record.updated_at, _dumps(record.chain),
                 _dumps(record.chains), _dumps(record.context), _dumps(record.options),
                 _dumps(record.meta)),
            )
        except sqlite3.IntegrityError:
            raise StoreError(f"run {record.run_id!r} already exists") from None

    def claim(self, run_id: str, expected_epoch: int) -> int:
        conn = self._read()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT epoch FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(run_id, self._run_ids(conn))
            if row[0] != expected_epoch:
                raise StaleEpochError(run_id, expected_epoch, row[0])
            conn.execute("UPDATE runs SET epoch = ?, updated_at = ? WHERE run_id = ?",
                         (expected_epoch + 1, time.time(), run_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return expected_epoch + 1

    def get_run(self, run_id: str) -> RunRecord:
        conn = self._read()
        row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id, self._run_ids(conn))
        return _record(row)

    def _run_ids(self, conn: sqlite3.Connection) -> list[str]:
        return [r[0] for r in conn.execute(
            "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 200")]

    def list_runs(self, limit: int | None = None) -> list[RunRecord]:
        sql = "SELECT * FROM runs ORDER BY created_at DESC, run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_record(r) for r in self._read().execute(sql)]

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        conn = self._read()
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise RunNotFoundError(run_id, self._run_ids(conn))
        rows = conn.execute(
            "SELECT run_id, seq, ts, epoch, kind, step_id, attempt, payload FROM events "
            "WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after_seq))
        return [Event(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7])) for r in rows]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL query (e.g. on the ``attempts`` view)."""
        return list(self._read().execute(sql, params))

    # ------------------------------------------------------------------ writes
    def _get_writer(self) -> _Writer:
        if self._writer is None:
            with self._writer_lock:
                if self._writer is None:
                    if self._closed:
                        raise StoreError("the store is closed")
                    self._writer = _Writer(self._target, self._uri, self.synchronous,
                                           self._stale)
                    self._writer.start()
        return self._writer

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        self._get_writer().queue.put(("append", run_id, epoch, tuple(events), run_status))

    async def flush(self, run_id: str, epoch: int) -> None:
        if self._writer is not None:
            await _wait_for(self._writer)
        if (run_id, epoch) in self._stale:
            raise StaleEpochError(run_id, epoch, self._current_epoch(run_id))

    def flush_sync(self) -> None:
        """Block until everything appended is committed (for scripts and tests)."""
        if self._writer is not None:
            done = threading.Event()
            self._writer.queue.put(("flush", lambda exc: done.set()))
            done.wait()

    def is_stale(self, run_id: str, epoch: int) -> bool:
        return (run_id, epoch) in self._stale

    def _current_epoch(self, run_id: str) -> int | None:
        row = self._read().execute("SELECT epoch FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            done = threading.Event()
            self._writer.queue.put(("stop", lambda exc: done.set()))
            done.wait()
            self._writer.join()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._keepalive.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"


async def _wait_for(writer: _Writer) -> None:
    """Wait (without blocking the loop) until the writer committed what is queued now."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): wait in a worker thread
        import anyio

        done = threading.Event()
        writer.queue.put(("flush", lambda exc: done.set()))
        await anyio.to_thread.run_sync(done.wait)
        return
    fut = loop.create_future()

    def resolve(exc: BaseException | None) -> None:
        def set_result() -> None:
            if not fut.done():
                if exc is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(exc)
        loop.call_soon_threadsafe(set_result)

    writer.queue.put(("flush", resolve))
    await fut


class _Writer(threading.Thread):
    """Drains the queue; each batch is one transaction (group commit)."""

    def __init__(self, target: str, uri: bool, synchronous: str, stale: set[tuple[str, int]]):
        super().__init__(name="chainlab-sqlite-writer", daemon=True)
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._target, self._uri, self._sync = target, uri, synchronous
        self._stale = stale

    def run(self) -> None:
        conn = _connect(self._target, self._uri)
        conn.execute(f"PRAGMA synchronous = {self._sync}")
        while True:
            batch = [self.queue.get()]
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            error = self._commit(conn, batch)
            stop = False
            for item in batch:
                if item[0] in ("flush", "stop"):
                    callback: Callable[[BaseException | None], None] = item[1]
                    callback(error)
                    stop = stop or item[0] == "stop"
            if stop:
                conn.close()
                return

    def _commit(self, conn: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> BaseException | None:
        appends = [item for item in batch if item[0] == "append"]
        if not appends:
            return None
        try:
            conn.execute("BEGIN IMMEDIATE")
            epochs: dict[str, int | None] = {}
            rows: list[tuple[Any, ...]] = []
            runs: dict[str, tuple[str | None, float]] = {}
            for _, run_id, epoch, events, status in appends:
                if run_id not in epochs:
                    row = conn.execute("SELECT epoch FROM runs WHERE run_id = ?",
                                       (run_id,)).fetchone()
                    epochs[run_id] = None if row is None else row[0]
                if epochs[run_id] != epoch or (run_id, epoch) in self._stale:
                    self._stale.add((run_id, epoch))
                    continue
                for ev in events:
                    rows.append((ev.run_id, ev.seq, ev.ts, ev.epoch, ev.kind, ev.step_id,
                                 ev.attempt, _dumps(ev.payload)))
                prev_status = runs.get(run_id, (None, 0.0))[0]
                last_ts = events[-1].ts if events else time.time()
                runs[run_id] = (status or prev_status, last_ts)
            conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", rows)
            for run_id, (status, ts) in runs.items():
                if status is None:
                    conn.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", (ts, run_id))
                else:
                    conn.execute("UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ?",
                                 (status, ts, run_id))
            conn.execute("COMMIT")
            return None
        except Exception as exc:  # noqa: BLE001 - reported to every flush waiter
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            return StoreError(f"could not commit {len(appends)} event batch(es): {exc}")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _record(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(run_id=row[0], chain_name=row[1], status=row[2], epoch=row[3],
                     created_at=row[4], updated_at=row[5], chain=json.loads(row[6]),
                     chains=json.loads(row[7]), context=json.loads(row[8]),
                     options=json.loads(row[9]), meta=json.loads(row[10]))


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (our migrations have no ';' inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
