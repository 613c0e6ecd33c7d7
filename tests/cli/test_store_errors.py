"""The command line when the database cannot be used: ONE line naming the file and the fix,
exit code 1, never a traceback; reading commands that do not wait behind another process's
write; and ``--db`` / CHAINLAB_DB going through ``chainlab.store.open_store``."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from chainlab.store import SQLiteStore

from .helpers import TOOLS, Result, chainlab, write

ADD = """
name: adds
steps:
  - {id: one, tool: add, args: {a: 1, b: 2}}
"""


def one_error_line(r: Result) -> str:
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("error: "), r.err
    return lines[0]


def stored_run(tmp_path: Path, db: str = "runs.db") -> str:
    r = chainlab("run", str(write(tmp_path / "adds.yaml", ADD)), "--tools", TOOLS,
                 "--db", db, "-q", cwd=tmp_path)
    assert r.code == 0, r.err
    return r.run_id()


def damage_table(path: Path, table: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        root, = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                             (table,)).fetchone()
        page_size, = conn.execute("PRAGMA page_size").fetchone()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))


# ------------------------------------------------------------------------ corrupt
def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_bytes(b"my notes, not a database\n" * 100)
    r = chainlab("runs", "--db", "notes.db", cwd=tmp_path)
    assert r.code == 1
    assert one_error_line(r) == (
        "error: 'notes.db' is damaged (file is not a database); the file is corrupt: move "
        "it away and start a new store, or restore a backup")


def test_a_damaged_table_found_while_reading(tmp_path: Path) -> None:
    run_id = stored_run(tmp_path)
    damage_table(tmp_path / "runs.db", "runs")
    for command in (["runs"], ["show", run_id], ["timeline", run_id]):
        r = chainlab(*command, "--db", "runs.db", cwd=tmp_path)
        assert r.code == 1, (command, r.err)
        line = one_error_line(r)
        assert line.startswith("error: 'runs.db' is damaged (database disk image is "
                               "malformed); the file is corrupt: move it away"), command


def test_a_run_does_not_go_on_appending_to_a_damaged_file(tmp_path: Path) -> None:
    stored_run(tmp_path)
    damage_table(tmp_path / "runs.db", "events")
    r = chainlab("run", str(tmp_path / "adds.yaml"), "--tools", TOOLS, "--db", "runs.db",
                 "-q", cwd=tmp_path)
    assert r.code == 1
    assert "error: 'runs.db' is damaged (database disk image is malformed); the file is " \
           "corrupt" in one_error_line(r)


# ------------------------------------------------------------------------ deleted mid-run
DOOMED_TOOLS = '''
import shutil
from pathlib import Path
from chainlab import Toolbox

toolbox = Toolbox("doomed")

@toolbox.tool
def wipe() -> str:
    shutil.rmtree(".chainlab")  # e.g. a clean-up script removes the store mid-run
    return "wiped"

@toolbox.tool(side_effects=True)
def charge(amount: int) -> str:
    Path("charged.txt").write_text(str(amount))
    return "charged"
'''

DOOMED = """
name: doomed
steps:
  - {id: wipe, tool: wipe}
  - {id: fee, tool: charge, args: {amount: 3}, depends_on: [wipe]}
"""


def test_deleting_the_store_mid_run_stops_it_before_the_side_effect(tmp_path: Path) -> None:
    write(tmp_path / "doomed_tools.py", DOOMED_TOOLS)
    chain = write(tmp_path / "doomed.yaml", DOOMED)
    r = chainlab("run", str(chain), "--tools", "doomed_tools:toolbox", "-q", cwd=tmp_path)
    assert r.code == 1
    line = one_error_line(r)
    assert line.startswith("error: the database file '.chainlab/chainlab.db' was deleted or "
                           "replaced while in use; nothing after seq ")
    assert line.endswith("keep the file and its directory in place while runs use it, then "
                         "start the run again (or resume it from the old file if it still "
                         "exists)")
    assert not (tmp_path / "charged.txt").exists()


# ------------------------------------------------------------------------ another writer
@pytest.fixture
def busy_db(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A database with one run while another connection holds a write transaction."""
    run_id = stored_run(tmp_path)
    blocker = sqlite3.connect(tmp_path / "runs.db", isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    blocker.execute("UPDATE runs SET status = 'failed'")  # uncommitted: nobody sees it
    yield tmp_path, run_id
    blocker.execute("ROLLBACK")
    blocker.close()


@pytest.mark.timeout(60)
def test_reading_commands_do_not_wait_for_a_writer(busy_db: tuple[Path, str]) -> None:
    cwd, run_id = busy_db
    r = chainlab("runs", "--db", "runs.db", cwd=cwd, timeout=20)
    assert r.code == 0, r.err
    assert run_id in r.out and "succeeded" in r.out
    r = chainlab("show", run_id, "--db", "runs.db", "--json", cwd=cwd, timeout=20)
    assert (r.code, r.json["status"]) == (0, "succeeded")
    r = chainlab("timeline", run_id, "--db", "runs.db", cwd=cwd, timeout=20)
    assert r.code == 0 and "1 attempts" in r.out


# ------------------------------------------------------------------------ --db values
def test_an_unreachable_postgresql_server_is_one_clear_line(tmp_path: Path) -> None:
    # a unix socket directory with no server in it: nothing leaves the machine
    url = f"postgresql://me:secret@/runs?host={tmp_path / 'no-server'}"
    r = chainlab("runs", "--db", url, cwd=tmp_path)
    assert r.code == 1
    line = one_error_line(r)
    assert "cannot reach the PostgreSQL server" in line and "secret" not in line
    r = chainlab("runs", cwd=tmp_path, CHAINLAB_DB=url)
    assert r.code == 1 and "cannot reach the PostgreSQL server" in one_error_line(r)
    assert list(tmp_path.iterdir()) == []  # no directory named 'postgresql:'


def test_memory_keeps_the_run_in_the_process(tmp_path: Path) -> None:
    chain = write(tmp_path / "adds.yaml", ADD)
    r = chainlab("run", str(chain), "--tools", TOOLS, "--db", ":memory:", "--json",
                 cwd=tmp_path)
    assert (r.code, r.json["outputs"]) == (0, {"one": 3})
    r = chainlab("runs", cwd=tmp_path, CHAINLAB_DB=":memory:")
    assert (r.code, r.err.strip()) == (0, "no runs in :memory:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adds.yaml"]


def test_a_read_only_store_object_is_what_reading_commands_can_use(tmp_path: Path) -> None:
    run_id = stored_run(tmp_path)
    from chainlab.cli.loading import open_store

    store = open_store(tmp_path / "runs.db", must_exist=True, readonly=True)
    assert isinstance(store, SQLiteStore) and store.readonly
    assert store.get_run(run_id).status == "succeeded"
    store.close()
