"""What only the SQLite store has: the file and its schema migrations, WAL, the writer
thread, ':memory:', refusal of bad writes, and several store objects on one file."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from chainlab.errors import StaleEpochError, StoreError
from chainlab.runtime import Runtime
from chainlab.store import Event, MemoryStore, SQLiteStore
from chainlab.store.sqlite import DEFAULT_PATH, MIGRATIONS
from chainlab.store.sqlite.schema import split_sql as _split_sql

from .conftest import ev, record

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- file, schema, migrations
def test_default_file_and_default_store_of_the_runtime(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runtime = Runtime()
    assert isinstance(runtime.store, SQLiteStore)
    assert Path(runtime.store.path) == DEFAULT_PATH == Path(".chainlab/chainlab.db")
    assert (tmp_path / ".chainlab" / "chainlab.db").is_file()
    runtime.store.close()
    assert isinstance(Runtime(store=MemoryStore()).store, MemoryStore)


def test_wal_and_durability_settings(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        assert store.query("PRAGMA journal_mode") == [("wal",)]
        assert store.synchronous == "FULL"
    assert SQLiteStore(tmp_path / "b.db", synchronous="normal").synchronous == "NORMAL"
    with pytest.raises(ValueError, match="'fast'"):
        SQLiteStore(tmp_path / "c.db", synchronous="fast")


async def test_schema_version_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        assert store.schema_version == len(MIGRATIONS) == 7
        store.create_run(record())
        store.append("r1", 1, [ev(1), ev(2)], run_status="suspended")
        await store.flush("r1", 1)
    with SQLiteStore(path) as store:  # nothing is migrated twice, nothing is lost
        assert store.query("SELECT version FROM schema_version ORDER BY version") == [
            (1,), (2,), (3,), (4,), (5,), (6,), (7,)]
        assert [e.seq for e in store.load_events("r1")] == [1, 2]
        assert store.get_run("r1").status == "suspended"


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99)")
    with pytest.raises(StoreError, match="schema version 99, newer than this chainlab "
                                         r"understands \(7\); upgrade chainlab"):
        SQLiteStore(path)
    with sqlite3.connect(path) as conn:  # untouched
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (99,)


def test_a_version_1_file_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in _split_sql(MIGRATIONS[0]):
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute("INSERT INTO runs (run_id, chain_name, status, epoch, created_at, updated_at, "
                 "chain) VALUES ('old', 'c', 'running', 2, 1, 1, '{}')")
    rows = [(1, 1, "step_started", {"tool": "send", "idempotency_key": "k"}),
            (2, 2, "step_succeeded", {"output": 1, "reconciled": True})]
    conn.executemany("INSERT INTO events VALUES ('old', ?, 1.0, ?, ?, 's', 1, ?)",
                     [(seq, epoch, kind, json.dumps(p)) for seq, epoch, kind, p in rows])
    conn.commit()
    assert conn.execute("SELECT status FROM attempts").fetchall() == [("succeeded",)]  # v1
    conn.close()
    with SQLiteStore(path) as store:  # a file of version 1 opens: migrated to experiments
        assert store.schema_version == 7
        assert store.list_experiments() == [] and store.list_runs()[0].run_id == "old"
        assert store.driver_of("old") is None and store.pending_requests("old") == []
        assert store.query("SELECT status, retry_delay_s FROM attempts") == [("interrupted", None)]
        assert store.get_run("old").epoch == 2


# ---------------------------------------------------------------- ':memory:'
async def test_memory_databases_are_separate_and_lose_nothing_under_concurrent_reads() -> None:
    a, b = SQLiteStore(":memory:"), SQLiteStore(":memory:")
    a.create_run(record())
    assert b.list_runs() == []
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:  # reads while the writer commits: must neither fail nor block it
        while not stop.is_set():
            try:
                a.load_events("r1")
                a.get_run("r1")
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for seq in range(1, 1001):
            a.append("r1", 1, [ev(seq)])
            if seq % 50 == 0:
                await a.flush("r1", 1)
        await a.flush("r1", 1)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert len(a.load_events("r1")) == 1000
    a.close()
    b.close()


# ---------------------------------------------------------------- refused writes
async def test_a_payload_that_is_not_json_stops_only_its_writer(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        store.create_run(record("r1"))
        store.create_run(record("r2"))
        store.append("r1", 1, [ev(1, run_id="r1")])
        store.append("r1", 1, [ev(2, "step_succeeded", run_id="r1", payload={"output": {1, 2}})])
        store.append("r2", 1, [ev(1, run_id="r2")])
        store.append("r1", 1, [ev(3, run_id="r1")])  # after the bad one: refused too (no gap)
        with pytest.raises(StoreError, match=r"r1.*\[2\] step_succeeded a.*not JSON"):
            await store.flush("r1", 1)
        await store.flush("r2", 1)
        assert [e.seq for e in store.load_events("r1")] == [1]
        assert [e.seq for e in store.load_events("r2")] == [1]
        store.append("r1", 1, [ev(4, run_id="r1")])
        with pytest.raises(StoreError):  # sticky: a later flush never claims durability
            await store.flush("r1", 1)
        store.append("r2", 1, [ev(2, run_id="r2", payload={"x": float("nan")})])
        with pytest.raises(StoreError, match="not JSON"):
            await store.flush("r2", 1)


async def test_a_failed_commit_is_reported_to_every_later_flush(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        store.create_run(record("r1"))
        store.create_run(record("r2"))
        store.append("r1", 1, [ev(1, run_id="r1")])
        await store.flush("r1", 1)
        store.append("r2", 1, [ev(1, run_id="r2")])
        store.append("r1", 1, [ev(1, run_id="r1")])  # duplicate seq: the transaction fails
        store.flush_sync()
        for run_id in ("r1", "r2"):  # both lost events in that transaction: both must know
            store.append(run_id, 1, [ev(5, run_id=run_id)])
            with pytest.raises(StoreError, match="could not commit"):
                await store.flush(run_id, 1)
        assert [e.seq for e in store.load_events("r1")] == [1]
        assert store.load_events("r2") == []


async def test_closed_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.create_run(record())
    store.append("r1", 1, [ev(1)])
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.append("r1", 1, [ev(2)])
    with SQLiteStore(tmp_path / "s.db") as again:  # close() committed what was queued
        assert [e.seq for e in again.load_events("r1")] == [1]


def test_the_writer_survives_an_event_loop_that_went_away(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.create_run(record())
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the writer has to wait for this lock

    async def give_up() -> None:
        store.append("r1", 1, [ev(1)])
        with anyio.move_on_after(0.2):
            await store.flush("r1", 1)

    anyio.run(give_up)  # the loop is closed while the writer still owes it an answer
    blocker.execute("ROLLBACK")
    blocker.close()
    store.flush_sync()

    async def later() -> None:
        store.append("r1", 1, [ev(2)])
        with anyio.fail_after(10):
            await store.flush("r1", 1)

    anyio.run(later)
    assert [e.seq for e in store.load_events("r1")] == [1, 2]
    store.close()


# ---------------------------------------------------------------- threads and processes
async def test_a_flush_commits_on_its_own_thread_unless_the_file_is_locked(
        tmp_path: Path) -> None:
    """A flush on the loop commits there (one transaction, no hand-off); while another
    connection holds the write lock it never waits on the loop: the loop keeps turning and
    the writer thread commits once the lock is gone."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.create_run(record())
    store.append("r1", 1, [ev(1)])
    await store.flush("r1", 1)
    assert store._writer is not None and store._writer.batches == 1
    writer = store._writer._inline.__self__  # type: ignore[union-attr]  # its SQLiteWriter
    inserts: dict[str, int] = {"inline": 0, "thread": 0}
    for name, conn in (("inline", writer.inline_conn), ("thread", writer.conn)):
        conn.set_trace_callback(lambda sql, name=name: inserts.__setitem__(
            name, inserts[name] + sql.startswith("INSERT INTO events")))
    store.append("r1", 1, [ev(2)])
    await store.flush("r1", 1)
    assert inserts == {"inline": 1, "thread": 0}
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    turns = 0
    done = anyio.Event()

    async def flush() -> None:
        store.append("r1", 1, [ev(3)])
        await store.flush("r1", 1)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(flush)
        while turns < 50:  # the loop is not blocked by the lock
            turns += 1
            await anyio.sleep(0)
        assert not done.is_set()
        blocker.execute("ROLLBACK")
        with anyio.fail_after(30):
            await done.wait()
    blocker.close()
    assert [e.seq for e in store.load_events("r1")] == [1, 2, 3]
    assert inserts == {"inline": 1, "thread": 1}  # the writer thread took the locked one
    store.close()


@pytest.mark.parametrize("where", ["file", ":memory:"])
async def test_sqlite_reads_never_run_on_the_event_loop_thread(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads and the writer thread's commits never run on the loop; what does is a flush's
    own commit (the write-ahead before an unsafe call, a run's end), one transaction on the
    inline connection, which never waits for a lock (busy_timeout 0)."""
    from tests.durability.chainlib import Ledger, crash_chain, make_toolbox, settle

    statements: list[tuple[int, str, str]] = []
    opened = SQLiteStore._open

    def traced(self: SQLiteStore) -> sqlite3.Connection:
        conn = opened(self)
        conn.set_trace_callback(lambda sql: statements.append(
            (threading.get_ident(), threading.current_thread().name, sql)))
        return conn

    monkeypatch.setattr(SQLiteStore, "_open", traced)
    path = str(tmp_path / "s.db") if where == "file" else ":memory:"
    store = await anyio.to_thread.run_sync(SQLiteStore, path)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    runtime = Runtime(make_toolbox(ledger), store)
    run = await runtime.start(crash_chain(), {"seed": 3}, run_id="r")
    assert (await run.wait()).suspended  # flushed: durable before wait() returns
    await runtime.aclose()
    runtime = Runtime(make_toolbox(ledger), store)
    run = await runtime.resume("r")  # get_run, claim, load_events
    result = await settle(run, ledger)  # approve, side effects (write-ahead flushes)
    assert result.ok
    await runtime.aclose()
    loop_thread = threading.get_ident()
    await anyio.to_thread.run_sync(store.close)
    assert statements
    on_loop = [sql for ident, _, sql in statements if ident == loop_thread]
    assert on_loop  # the write-ahead flushes committed inline
    commit = ("BEGIN IMMEDIATE", "SELECT epoch FROM runs WHERE run_id = ",
              "INSERT INTO events VALUES", "UPDATE runs SET status = ", "COMMIT")
    opening = ("PRAGMA busy_timeout = 0", "PRAGMA synchronous = FULL")
    assert [sql for sql in on_loop if not sql.startswith(commit + opening)] == []
    if where == "file":  # (a :memory: store has one connection, shared behind a lock)
        assert on_loop[:2] == list(opening)
        assert on_loop.count("PRAGMA busy_timeout = 0") == 1  # one inline connection
    writes = {name for _, name, sql in statements if sql.startswith("INSERT INTO events")}
    # the head of a new run's log goes with its record (create_run, one transaction, in a
    # worker thread); later events with a flush's commit, or the group-commit writer's
    assert writes <= {"chainlab-sqlite-writer", "AnyIO worker thread", "MainThread"}
    assert "AnyIO worker thread" in writes


async def test_two_store_objects_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    a.create_run(record("r1"))
    a.append("r1", 1, [ev(1, run_id="r1")])
    await a.flush("r1", 1)
    assert b.load_events("r1") == a.load_events("r1")
    assert b.claim("r1", 1) == 2  # b takes over: a is fenced at its next write
    a.append("r1", 1, [ev(2, run_id="r1")])
    with pytest.raises(StaleEpochError):
        await a.flush("r1", 1)
    b.append("r1", 2, [ev(2, epoch=2, run_id="r1")])
    await b.flush("r1", 2)

    def write_many(store: SQLiteStore, run_id: str) -> None:
        store.create_run(record(run_id))
        for seq in range(1, 201):
            store.append(run_id, 1, [ev(seq, run_id=run_id)])
        store.flush_sync()

    async with anyio.create_task_group() as tg:  # both writers commit at the same time
        tg.start_soon(anyio.to_thread.run_sync, write_many, a, "from-a")
        tg.start_soon(anyio.to_thread.run_sync, write_many, b, "from-b")
    for store in (a, b):
        assert {r.run_id for r in store.list_runs()} == {"r1", "from-a", "from-b"}
        assert len(store.load_events("from-a")) == len(store.load_events("from-b")) == 200
        assert [(e.seq, e.epoch) for e in store.load_events("r1")] == [(1, 1), (2, 2)]
    a.close()
    b.close()


def test_events_read_back_equal_what_was_written(tmp_path: Path) -> None:
    events = [Event("r1", 1, 1.5, 1, "step_started", "a/b", 3, {"args": {"x": [1, "é"]}})]
    with SQLiteStore(tmp_path / "s.db") as store:
        store.create_run(record())
        store.append("r1", 1, events)
        store.flush_sync()
        assert store.load_events("r1") == events


def _read_until_closed(store: SQLiteStore, started: threading.Barrier,
                       errors: list[BaseException]) -> None:
    started.wait()
    try:
        while True:  # a query long enough for close() to land in the middle of it
            store.query("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
                        "FROM n WHERE i < 200000) SELECT count(*) FROM n")
            store.driver_of("r1")
    except StoreError as exc:
        errors.append(exc)


def test_closing_while_other_threads_read_never_crashes(tmp_path: Path) -> None:
    """close() while other threads run long queries (a runtime's heartbeat, a watcher's poll):
    every reader ends with a StoreError saying the store is closed, none hangs or crashes.
    (A crash of the interpreter on close was seen once under a heartbeat thread and not
    reproduced since; close() now also waits for queries in flight, see _InUse.)"""
    for round_ in range(5):
        store = SQLiteStore(tmp_path / f"busy{round_}.db")
        store.create_run(record())
        store.append("r1", 1, [ev(i) for i in range(1, 50)])
        store.flush_sync()
        errors: list[BaseException] = []
        started = threading.Barrier(5)
        threads = [threading.Thread(target=_read_until_closed, args=(store, started, errors))
                   for _ in range(4)]
        for t in threads:
            t.start()
        started.wait()
        store.close()
        for t in threads:
            t.join(10)
        assert len(errors) == 4 and all("is closed" in str(e) for e in errors), errors


async def test_a_commit_that_raises_fails_its_writers_instead_of_hanging_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside a commit must not kill the writer thread with flushes queued behind it
    (they would wait forever): the batch's writers fail, later batches still commit."""
    from chainlab.store.sqlite import store as sqlite_module

    store = SQLiteStore(tmp_path / "bug.db")
    store.create_run(record())
    store.create_run(record("r2"))
    real = sqlite_module.SQLiteWriter._commit
    calls = []

    def broken_once(self: object, conn: sqlite3.Connection, appends: list) -> None:
        calls.append(len(appends))
        if len(calls) == 1:
            raise RuntimeError("boom")
        real(self, conn, appends)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite_module.SQLiteWriter, "_commit", broken_once)
    store.append("r1", 1, [ev(1)])
    with pytest.raises(StoreError, match="a chainlab bug"):
        await store.flush("r1", 1)
    store.append("r2", 1, [ev(1, run_id="r2")])
    await store.flush("r2", 1)
    assert [e.seq for e in store.load_events("r2")] == [1]
    store.close()
