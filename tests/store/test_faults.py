"""SQLiteStore when its file goes wrong: deleted or replaced while in use, read-only,
corrupt, or locked by another process's write. Each fault is a StoreError naming the file
and the fix, raised from the sqlite3 error (never the raw sqlite3 error)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import StoreError, StoreFileError
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.store.sqlite.schema import MIGRATIONS

from .conftest import ev, record

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- deleted or replaced
async def test_deleting_the_directory_fails_the_next_durable_write(tmp_path: Path) -> None:
    path = tmp_path / "store" / "runs.db"
    with SQLiteStore(path) as store:
        store.create_run(record())
        store.append("r1", 1, [ev(1), ev(2)])
        await store.flush("r1", 1)
        shutil.rmtree(tmp_path / "store")
        store.append("r1", 1, [ev(3)])
        with pytest.raises(StoreFileError) as info:
            await store.flush("r1", 1)
        msg = str(info.value)
        assert f"the database file {str(path)!r} was deleted or replaced while in use" in msg
        assert "nothing after seq 2 of run 'r1' was saved" in msg
        assert "keep the file and its directory in place" in msg
        assert (info.value.path, info.value.fault) == (str(path), "gone")
        with pytest.raises(StoreFileError, match="was deleted or replaced"):  # sticky
            await store.flush("r1", 1)
        with pytest.raises(StoreFileError, match="was deleted or replaced"):
            store.create_run(record("r2"))


async def test_deleting_the_file_after_the_last_commit_is_noticed_by_flush(
        tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.create_run(record())
        store.append("r1", 1, [ev(1)])
        await store.flush("r1", 1)
        path.unlink()  # what was committed went with the file
        with pytest.raises(StoreFileError, match=r"nothing after seq 1 of run 'r1' was saved"):
            await store.flush("r1", 1)


async def test_replacing_the_file_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    other = tmp_path / "other.db"
    SQLiteStore(other).close()
    with SQLiteStore(path) as store:
        store.create_run(record())
        # (committed into the file itself: SQLite would replay a leftover -wal file onto
        # whatever file takes the name next, which is not what this test is about)
        store.query("PRAGMA wal_checkpoint(TRUNCATE)")
        os.replace(other, path)  # e.g. a restore of an old copy while a run goes on
        store.append("r1", 1, [ev(1)])
        with pytest.raises(StoreFileError, match="was deleted or replaced while in use"):
            await store.flush("r1", 1)
        with pytest.raises(StoreFileError, match="was deleted or replaced"):
            store.claim("r1", 1)
    with SQLiteStore(path) as again:  # nothing was written into the file put in its place
        assert again.list_runs() == []


def sealed_toolbox(calls: list[str], doomed: Path) -> Toolbox:
    tb = Toolbox("doomed")

    @tb.tool
    def wipe() -> str:
        calls.append("wipe")
        shutil.rmtree(doomed)  # the store's directory goes away mid-run
        return "wiped"

    @tb.tool(side_effects=True)
    def charge(note: str) -> str:
        calls.append("charge")
        return "charged"

    return tb


async def test_a_run_stops_before_its_next_side_effect_when_the_file_is_deleted(
        tmp_path: Path) -> None:
    doomed = tmp_path / "store"
    store = SQLiteStore(doomed / "runs.db")
    calls: list[str] = []
    chain = Chain.from_dict({"name": "doomed", "steps": [
        {"id": "wipe", "tool": "wipe"},
        {"id": "charge", "tool": "charge", "args": {"note": "after"}, "depends_on": ["wipe"]}]})
    runtime = Runtime(sealed_toolbox(calls, doomed), store)
    run = await runtime.start(chain, run_id="r")
    with pytest.raises(StoreError, match="was deleted or replaced while in use"):
        await run.wait()
    assert calls == ["wipe"]  # the side-effecting call was never made
    await runtime.aclose()
    store.close()


# ---------------------------------------------------------------- read-only
@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="chainlab-ro-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def _write_as_nobody(path: str, queue: Any) -> None:  # pragma: no cover - in a child
    if os.geteuid() == 0:  # root writes through any mode bits: drop to nobody
        os.setgid(65534)
        os.setuid(65534)
    result: list[tuple[str, str, str]] = []
    store = SQLiteStore(path)
    for write in (lambda: store.create_run(record("r2")),
                  lambda: store.claim("r1", 1)):
        try:
            write()
            result.append(("ok", "", ""))
        except Exception as exc:
            result.append((type(exc).__name__, str(exc), type(exc.__cause__).__name__))
    queue.put(result)


def test_a_read_only_file_is_a_store_error_with_the_fix(shared_dir: Path) -> None:
    path = shared_dir / "runs.db"
    with SQLiteStore(path) as store:
        store.create_run(record())
    path.chmod(0o444)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_write_as_nobody, args=(str(path), queue))
    child.start()
    results = queue.get(timeout=60)
    child.join(60)
    for name, message, cause in results:
        assert (name, cause) == ("StoreFileError", "OperationalError")
        assert f"cannot write to {str(path)!r} (attempt to write a readonly database)" in message
        assert f"make it writable: chmod u+w {path}" in message


# ---------------------------------------------------------------- corrupt
def _filled(path: Path, runs: int = 60) -> None:
    with SQLiteStore(path) as store:
        for i in range(runs):
            store.create_run(record(f"run-{i:03d}", created_at=float(i)))


def test_garbage_in_the_middle_of_the_file_is_named_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _filled(path)
    size = path.stat().st_size
    with path.open("r+b") as f:  # keep the header (page 1), wreck the pages after it
        f.seek(4096)
        f.write(b"\xde\xad\xbe\xef" * ((size - 4096) // 4))
    with pytest.raises(StoreFileError) as info, SQLiteStore(path) as store:
        store.list_runs()
    msg = str(info.value)
    assert str(path) in msg and "database disk image is malformed" in msg
    assert ("the file is corrupt: move it away and start a new store, or restore a backup"
            in msg)
    assert info.value.fault == "corrupt"
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_a_file_that_is_not_a_database_is_named_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(StoreFileError, match=r"file is not a database.*the file is corrupt: "
                                             r"move it away"):
        SQLiteStore(path)


async def test_a_run_stops_appending_to_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _filled(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        root, = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'"
                             ).fetchone()
        page_size, = conn.execute("PRAGMA page_size").fetchone()
    with path.open("r+b") as f:  # the events table is damaged, the runs table is not
        f.seek((root - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    with SQLiteStore(path) as store:
        store.create_run(record())
        store.append("r1", 1, [ev(1)])
        with pytest.raises(StoreFileError, match="the file is corrupt: move it away") as info:
            await store.flush("r1", 1)
        assert info.value.fault == "corrupt"
        assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
        # nothing more is written into a damaged file, for any run
        with pytest.raises(StoreFileError, match="the file is corrupt"):
            store.create_run(record("r2"))
        store.append("r3", 1, [ev(1, run_id="r3")])
        with pytest.raises(StoreFileError, match="the file is corrupt"):
            await store.flush("r3", 1)


# ---------------------------------------------------------------- another writer
@pytest.fixture
def locked_db(tmp_path: Path) -> Iterator[Path]:
    """A store file with one run, while another connection holds a write transaction."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.create_run(record())
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    blocker.execute("UPDATE runs SET status = 'failed'")  # not committed: nobody sees it
    yield path
    blocker.execute("ROLLBACK")
    blocker.close()


@pytest.mark.timeout(60)
def test_opening_a_current_file_does_not_wait_for_another_writer(locked_db: Path) -> None:
    with SQLiteStore(locked_db) as store:
        assert [(r.run_id, r.status) for r in store.list_runs()] == [("r1", "running")]
    with SQLiteStore(locked_db, readonly=True) as store:
        assert store.get_run("r1").status == "running"


def test_a_read_only_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    SQLiteStore(path).close()
    with SQLiteStore(path, readonly=True) as store:
        for write in (lambda: store.create_run(record()), lambda: store.claim("r1", 1),
                      lambda: store.append("r1", 1, [ev(1)])):
            with pytest.raises(StoreError, match=r"opened read-only"):
                write()
    with pytest.raises(StoreFileError, match=r"no chainlab database at"):
        SQLiteStore(tmp_path / "missing.db", readonly=True)
    assert not (tmp_path / "missing.db").exists()


def test_a_read_only_open_of_an_older_schema_says_to_write_first(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in MIGRATIONS[0].split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.close()
    with pytest.raises(StoreFileError) as info:
        SQLiteStore(path, readonly=True)
    assert info.value.fault == "old_schema"
    assert f"{str(path)!r} has schema version 1, older than this chainlab's " \
           f"({len(MIGRATIONS)})" in str(info.value)
    assert "run a command that writes to it first" in str(info.value)
    with SQLiteStore(path) as store:  # a writing open upgrades it
        assert store.schema_version == len(MIGRATIONS)
    with SQLiteStore(path, readonly=True) as store:
        assert store.list_runs() == []
