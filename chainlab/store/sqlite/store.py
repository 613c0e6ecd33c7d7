"""SQLite store (the default): WAL, one writer thread with group commit, epoch fencing.

* Every ``append`` is queued and committed with whatever else has queued up, in one
  transaction (group commit: :mod:`chainlab.store._writer`): by the writer thread for what
  nobody waits for, or by the caller of a flush on its own thread when the writer is idle
  (on a connection that never waits for another process's lock: then the writer thread
  does it). ``await flush()`` is the durability barrier the runtime takes before
  side-effecting calls and when a run stops or suspends.
* Each transaction checks the run's epoch; a write from a stale epoch is refused (nothing of
  it is committed) and the next ``flush`` of that writer raises StaleEpochError. A write that
  cannot be committed (a payload that is not JSON, a disk error) stops that writer the same
  way: its ``flush`` raises StoreError from then on, so a later flush can never report events
  as durable when some before them were lost. Other runs in the same batch are unaffected
  by a bad payload.
* ``MIGRATIONS`` is append-only; ``schema_version`` records how far a file is migrated.
* ``attempts`` and ``step_runs`` are SQL views over ``events`` (the event log is the source
  of truth), so ``sqlite3 .chainlab/chainlab.db 'select * from attempts'`` works.
* A file store gives each thread its own connection (WAL: readers never block the writer).
  ``":memory:"`` uses ONE connection shared behind a lock (an in-memory database exists only
  for its connection; shared-cache mode would make readers fail writes with "table locked").
* Opening a file whose schema is current writes nothing (no write lock: reading commands
  never wait behind another process's write); ``readonly=True`` opens it ``mode=ro``.
* Faults of the file are StoreFileError naming the file and the fix, mapped from sqlite3 in
  one place (:func:`_fault`). The file is remembered by (device, inode): deleted or replaced
  while in use, the next commit and the next ``flush`` fail instead of writing into a file
  nobody can find any more (the runtime flushes before every side-effecting call).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from chainlab.errors import (
    RunExistsError,
    RunNotFoundError,
    StaleEpochError,
    StoreError,
    StoreFileError,
)
from chainlab.events.event import Event, event_kind
from chainlab.store._writer import GroupCommitWriter, WriterStore
from chainlab.store.base import DriverInfo, RunRecord, check_run_id
from chainlab.store.sql_experiments import SqlExperiments, listing
from chainlab.store.sql_rows import (
    Append,
    event_rows,
    insert_run,
    not_text,
    record_of,
    run_select,
    sort_batch,
)
from chainlab.store.sqlite.errors import _fault
from chainlab.store.sqlite.queue import SQLiteQueue
from chainlab.store.sqlite.schema import MIGRATIONS, migrate

__all__ = ["DEFAULT_PATH", "MIGRATIONS", "SQLiteStore"]

DEFAULT_PATH = Path(".chainlab") / "chainlab.db"

_SYNC_MODES = ("full", "normal", "off")
_RUN_COLUMNS = run_select("sqlite")


class SQLiteStore(SQLiteQueue, SqlExperiments, WriterStore):
    """Runs and events in a SQLite file (``.chainlab/chainlab.db`` by default, ``":memory:"``
    for a throwaway database).

    ``synchronous`` is SQLite's durability setting: ``"full"`` (default) survives power loss,
    ``"normal"`` survives a crash of the process (faster commits in WAL mode).
    Blocking reads (``get_run``, ``list_runs``, ``load_events``, ``query``) may be called
    from any thread; the runtime calls them from worker threads, never from the event loop.

    ``readonly=True`` opens an existing file without ever writing to it (writes raise
    StoreError); a file that still needs a schema migration is refused then.

    Raises StoreError when the file has a newer schema than this chainlab understands,
    StoreFileError when the file cannot be used (missing for ``readonly``, read-only,
    corrupt, locked, no directory for it); later operations raise StoreFileError too, e.g.
    when the file was deleted or replaced while in use.
    """

    blocking = True

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *,
                 synchronous: str = "full", readonly: bool = False):
        if synchronous.lower() not in _SYNC_MODES:
            raise ValueError(f"synchronous must be 'full', 'normal' or 'off', got {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.readonly = readonly
        self._init_writes()
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened
        self._gone = False  # the file at path is no longer the one opened (sticky)
        self._checks = 0  # commits found the file still the one opened, right after it
        self._corrupt: StoreFileError | None = None  # once seen, nothing more is written
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._local = threading.local()
        self._shared: sqlite3.Connection | None = None
        self._lock: contextlib.AbstractContextManager[Any]
        if str(path) == ":memory:":
            self.path = ":memory:"
            self._lock = threading.RLock()
            self._shared = self._open()
        else:
            self.path = str(path)
            self._lock = _InUse(self)  # no lock: WAL readers run side by side
            self._prepare(Path(path))
        try:
            with self._lock, self._sqlite_errors("open"):
                conn = self._conn()
                if self._shared is None and not readonly:
                    conn.execute("PRAGMA journal_mode = WAL")  # no write when it already is
                migrate(conn, self.path, readonly=readonly)
            if self._shared is None:
                self._identity = _identity(self.path)
        except BaseException:
            self._close_connections()
            raise

    def _prepare(self, path: Path) -> None:
        if self.readonly:
            if not path.is_file():
                raise StoreFileError(self.path, "unavailable",
                                     f"no chainlab database at {self.path!r}",
                                     "start a run first, or point the store at the right file")
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreFileError(
                self.path, "unavailable",
                f"cannot create the directory {str(path.parent)!r} for {self.path!r} "
                f"({exc.strerror})", "put the store in a directory you may write") from exc

    # ------------------------------------------------------------------ connections
    def _open(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        target = self.path
        if self.readonly:  # mode=ro: this connection cannot write, even by mistake
            target = Path(self.path).absolute().as_uri() + "?mode=ro"
        conn = sqlite3.connect(target, uri=self.readonly, isolation_level=None,
                               check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout = 30000")
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (the shared one for ``:memory:``; hold ``_lock``)."""
        if self._shared is not None:
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    def _fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock, self._sqlite_errors("read"):
            return self._conn().execute(sql, params).fetchall()

    @contextlib.contextmanager
    def _sqlite_errors(self, doing: str, run_id: str | None = None) -> Iterator[None]:
        """sqlite3 errors of the caller's thread become StoreError (see :meth:`_translate`)."""
        try:
            yield
        except sqlite3.Error as exc:
            lost = self._lost(run_id) if run_id else "it cannot be used any more"
            raise self._translate(exc, lost) or StoreError(
                f"cannot {doing} {self.path!r}: {exc}") from exc

    def _translate(self, exc: sqlite3.Error, lost: str) -> StoreFileError | None:
        """The fault of the file behind ``exc``, or None when it is not the file's."""
        if not self._file_ok() or self._lost_companion(exc):
            gone = self._gone_error(lost)
            gone.__cause__ = exc
            return gone
        fault = _fault(exc, self.path)
        if fault is not None and fault.fault == "corrupt" and self._corrupt is None:
            self._corrupt = fault  # more writes into a damaged file would spread the damage
        return fault

    # ------------------------------------------------------------------ the file
    def _file_ok(self) -> bool:
        """False once the file at ``path`` is not the one opened (deleted, replaced)."""
        if self._identity is None or self._gone:
            return not self._gone
        try:
            self._gone = _identity(self.path) != self._identity
        except OSError:
            self._gone = True
        return not self._gone

    def _lost_companion(self, exc: sqlite3.Error) -> bool:
        """An I/O error while our connections keep the -wal and -shm files open, and one of
        them is missing: they were deleted (with the file, e.g. ``rm -r`` of the directory,
        which may reach them first)."""
        name = getattr(exc, "sqlite_errorname", "") or ""
        if self._identity is None or self.readonly or not name.startswith(
                ("SQLITE_IOERR", "SQLITE_CANTOPEN")):
            return False
        if all(os.path.exists(self.path + suffix) for suffix in ("-wal", "-shm")):
            return False
        self._gone = True
        return True

    def _gone_error(self, lost: str) -> StoreFileError:
        return StoreFileError(
            self.path, "gone", f"the database file {self.path!r} was deleted or replaced "
            f"while in use; {lost}", "keep the file and its directory in place while runs "
            "use it, then start the run again (or resume it from the old file if it still "
            "exists)")

    def _read_only(self) -> StoreError:
        return StoreError(f"{self!r} was opened read-only; open it with readonly=False to "
                          "write")

    def _refusal(self, run_id: str | None, first_unsaved: int | None = None
                 ) -> StoreError | None:
        """Why nothing more of ``run_id`` (None: of the queue's tables) may be written (the
        file is gone or damaged)."""
        if self.readonly:
            return self._read_only()
        if not self._file_ok():
            lost = self._lost(run_id, first_unsaved) if run_id else "nothing was written"
            return self._gone_error(lost)
        return self._corrupt

    # ------------------------------------------------------------------ schema
    @property
    def schema_version(self) -> int:
        """How far this database is migrated (``len(MIGRATIONS)`` once opened)."""
        return int(self._fetch("SELECT max(version) FROM schema_version")[0][0])

    # ------------------------------------------------------------------ runs
    def create_run(self, record: RunRecord, driver: DriverInfo | None = None,
                   events: Sequence[Event] = (), key: str | None = None) -> None:
        check_run_id(record.run_id)
        rows = event_rows(tuple(events))
        if isinstance(rows, StoreError):
            raise rows
        taken = False
        try:
            with self._write(record.run_id) as conn:
                try:
                    insert_run(conn, record, key, "?")
                except sqlite3.IntegrityError:
                    taken = True
                    raise
                if driver is not None:
                    self._put_driver(conn, record.run_id, driver, record.epoch)
                conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", rows)
        except StoreError:
            if taken:
                raise self._taken(record.run_id, key) from None
            raise
        except UnicodeEncodeError as exc:  # (not valid text: nothing was written)
            raise not_text(record.run_id, exc) from None
        if events:
            self._saved[record.run_id] = events[-1].seq

    def _taken(self, run_id: str, key: str | None) -> StoreError:
        """Why a new run could not be inserted: its id, or its key, names a run already."""
        found = self.run_for_key(key) if key is not None else None
        return RunExistsError(found, key) if found is not None else RunExistsError(run_id)

    def run_for_key(self, key: str) -> str | None:
        rows = self._fetch("SELECT run_id FROM run_keys WHERE idempotency_key = ?", (key,))
        return rows[0][0] if rows else None

    def claim(self, run_id: str, expected_epoch: int, expected_seq: int | None = None,
              driver: DriverInfo | None = None) -> int:
        with self._write(run_id) as conn:  # one IMMEDIATE transaction: check, then claim
            current = self._epoch(conn, run_id)
            if current != expected_epoch:
                raise StaleEpochError(run_id, expected_epoch, current)
            if expected_seq is not None:
                last = conn.execute("SELECT coalesce(max(seq), 0) FROM events WHERE "
                                    "run_id = ?", (run_id,)).fetchone()[0]
                if last != expected_seq:
                    raise StaleEpochError(run_id, expected_epoch, current,
                                          moved_on=(expected_seq, last))
            conn.execute("UPDATE runs SET epoch = ?, updated_at = ? WHERE run_id = ?",
                         (expected_epoch + 1, time.time(), run_id))
            if driver is not None:
                self._put_driver(conn, run_id, driver, expected_epoch + 1)
        return expected_epoch + 1

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock, self._sqlite_errors("read"):
            conn = self._conn()
            row = conn.execute(f"SELECT {_RUN_COLUMNS} WHERE runs.run_id = ?",
                               (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(run_id, self._run_ids(conn))
        return record_of(row)

    def _run_ids(self, conn: sqlite3.Connection) -> list[str]:
        return [r[0] for r in conn.execute(
            "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 200")]

    def list_runs(self, limit: int | None = None, *,
                  experiment: str | None = None) -> list[RunRecord]:
        where, params = listing("sqlite", experiment)
        sql = f"SELECT {_RUN_COLUMNS}{where} ORDER BY created_at DESC, runs.run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [record_of(r) for r in self._fetch(sql.replace("%s", "?"), params)]

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        with self._lock, self._sqlite_errors("read"):
            conn = self._conn()
            rows = conn.execute(
                "SELECT run_id, seq, ts, epoch, kind, step_id, attempt, payload FROM events "
                "WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after_seq)).fetchall()
            if not rows and conn.execute("SELECT 1 FROM runs WHERE run_id = ?",
                                         (run_id,)).fetchone() is None:
                raise RunNotFoundError(run_id, self._run_ids(conn))
        return [Event(r[0], r[1], r[2], r[3], event_kind(r[4]), r[5], r[6], json.loads(r[7]))
                for r in rows]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL query (e.g. on the ``attempts`` view)."""
        return self._fetch(sql, params)

    # ------------------------------------------------------------------ writes
    def _new_writer(self) -> GroupCommitWriter:
        return SQLiteWriter(self).thread

    def _check_append(self) -> None:
        super()._check_append()
        if self.readonly:
            raise self._read_only()

    async def flush(self, run_id: str, epoch: int) -> None:
        checks = self._checks
        await super().flush(run_id, epoch)
        # what was committed went with the old file? (a commit since the flush began looked
        # right after it: no second look)
        if self._gone or (self._checks == checks and not self._file_ok()):
            key = (run_id, epoch)
            self._failed.setdefault(key, self._gone_error(self._lost(run_id)))
            raise self._failed[key]

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close every connection."""
        if self._stop_writer():
            self._close_connections()

    def _close_connections(self) -> None:
        self._closed = True
        # a connection is closed only when no thread uses it: closing one under a query in
        # another thread (a runtime's heartbeat, a watcher's poll) crashes the interpreter
        lock = self._lock
        with lock if not isinstance(lock, _InUse) else lock.idle(), self._conns_lock:
            conns, self._conns = self._conns, []
            for conn in conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"


# ---------------------------------------------------------------------------- the writer
class SQLiteWriter:
    """The store's write half, on the group-commit writer thread
    (:mod:`chainlab.store._writer`): open the thread's connection, and commit each batch of
    appends in one ``BEGIN IMMEDIATE`` transaction, refusing what a stale epoch wrote and
    mapping SQLite's errors to the store's. (It was a module of its own that imported this
    one for the store it reaches into, while this one imported it: one concept, one file.)"""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.conn: sqlite3.Connection | None = None
        self.broken: Exception | None = None
        # the connection a flush commits on, on its own thread (one at a time): it never
        # waits for another connection's lock (busy_timeout 0: the writer thread waits)
        self.inline_conn: sqlite3.Connection | None = None
        self.thread = GroupCommitWriter("chainlab-sqlite-writer", self.commit_batch,
                                        start=self.open, failed=store._failed,
                                        inline=self.commit_inline)

    def open(self) -> None:
        store = self.store
        try:
            if store._shared is not None:
                self.conn = store._shared
            else:
                self.conn = store._open()
                self.conn.execute(f"PRAGMA synchronous = {store.synchronous}")
                store._file_ok()  # (opened on a file put in the opened one's place: gone)
        except Exception as exc:
            self.broken = exc

    def commit_inline(self, appends: list[Append]) -> bool:
        """Commit a batch on the caller's thread; False (nothing written) when the database
        is busy or the connection cannot be opened: the writer thread takes the batch."""
        store = self.store
        if store._closed:  # closing: the writer thread commits what is left
            return False
        conn = self.inline_conn
        if conn is None:
            if store._shared is not None:
                conn = store._shared
            else:
                try:
                    conn = store._open()
                    conn.execute("PRAGMA busy_timeout = 0")
                    conn.execute(f"PRAGMA synchronous = {store.synchronous}")
                except Exception:
                    return False  # the writer thread meets the same fault and reports it
                store._file_ok()  # (opened on a file put in the opened one's place: gone)
            self.inline_conn = conn
        with store._lock:
            return self._commit(conn, appends) is not False

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

    def _commit(self, conn: sqlite3.Connection, appends: list[Append]) -> bool:
        """Commit every acceptable append in one transaction; record refused writers.
        False: the inline connection found the database busy (nothing written)."""
        store = self.store
        stale, failed = store._stale, store._failed
        if store._gone or store._corrupt is not None:  # gone or damaged: no writes
            for _, run_id, epoch, events, _ in appends:
                refused = store._refusal(run_id, events[0].seq if events else None)
                if refused is not None and (run_id, epoch) not in stale:
                    failed.setdefault((run_id, epoch), refused)
            return True
        written: dict[tuple[str, int], int | None] = {}  # -> first seq in this batch
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if conn is self.inline_conn and conn is not store._shared and str(
                        getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_BUSY"):
                    return False
                raise

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
            return True
        if not store._file_ok():  # deleted or replaced meanwhile: this went with the old file
            for key, first in written.items():
                failed.setdefault(key, store._gone_error(store._lost(key[0], first)))
            return True
        store._checks += 1
        saved = store._saved
        for row in rows:  # in seq order: the last one of each run stays
            saved[row[0]] = row[1]
        return True


class _InUse:
    """A file store's guard around each use of a connection: no mutual exclusion (WAL lets
    readers and the writer run side by side), but ``close`` waits until no thread is inside,
    and a use that starts after ``close`` is a StoreError naming the store."""

    def __init__(self, store: SQLiteStore):
        self._store = store
        self._users = 0
        self._cv = threading.Condition()

    def __enter__(self) -> None:
        with self._cv:
            # the writer thread commits what was queued before close(), after _closed is set
            if self._store._closed and threading.current_thread() is not self._store._writer:
                raise StoreError(f"{self._store!r} is closed")
            self._users += 1

    def __exit__(self, *exc: object) -> None:
        with self._cv:
            self._users -= 1
            if not self._users:
                self._cv.notify_all()

    @contextlib.contextmanager
    def idle(self, timeout: float = 30.0) -> Iterator[None]:
        """Wait (up to ``timeout``) until no thread uses a connection."""
        with self._cv:
            self._cv.wait_for(lambda: self._users == 0, timeout)
            yield


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino
