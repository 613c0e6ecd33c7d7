"""``chainlab.store.open_store(url_or_path)``: what the CLI ``--db``, the magics ``--db`` and
CHAINLAB_DB all go through (DESIGN §13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chainlab.errors import StoreError, StoreFileError
from chainlab.store import MemoryStore, SQLiteStore, open_store, store_location
from chainlab.store.sqlite import DEFAULT_PATH


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHAINLAB_DB", raising=False)


def test_paths_and_sqlite_urls_give_sqlite_stores(tmp_path: Path) -> None:
    cases: list[tuple[str | Path, str]] = [
        ("runs/a.db", "runs/a.db"), (Path("runs/b.db"), "runs/b.db"),
        ("sqlite:///runs/c.db", "runs/c.db"), (f"sqlite:///{tmp_path}/d.db", f"{tmp_path}/d.db")]
    for given, path in cases:
        store = open_store(given)
        assert isinstance(store, SQLiteStore) and store.path == path, given
        store.close()
        assert (tmp_path / path).is_file()


def test_memory_gives_a_memory_store_and_no_file(tmp_path: Path) -> None:
    assert isinstance(open_store(":memory:"), MemoryStore)
    assert open_store(":memory:") is not open_store(":memory:")  # each call: a new one
    assert list(tmp_path.iterdir()) == []


def test_the_default_is_chainlab_db_then_the_default_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store_location() == str(DEFAULT_PATH)
    monkeypatch.setenv("CHAINLAB_DB", ":memory:")
    assert isinstance(open_store(), MemoryStore)
    monkeypatch.setenv("CHAINLAB_DB", "sqlite:///env.db")
    store = open_store()
    assert isinstance(store, SQLiteStore) and store.path == "env.db"
    store.close()
    monkeypatch.setenv("CHAINLAB_DB", "")
    assert store_location() == str(DEFAULT_PATH)


def test_postgresql_urls_are_kept_as_urls() -> None:
    assert store_location("postgresql://me:secret@db.example:5432/runs") == (
        "postgresql://me:secret@db.example:5432/runs")
    assert store_location("postgres://db/runs") == "postgresql://db/runs"
    assert store_location("postgresql+psycopg://db/runs") == "postgresql://db/runs"


def test_other_urls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"'mysql://db/runs': unknown kind of store 'mysql'"):
        open_store("mysql://db/runs")
    with pytest.raises(StoreError, match=r"'sqlite:/x.db' is not a SQLite URL: write "
                                         r"sqlite:///relative/path"):
        open_store("sqlite:/x.db")
    assert list(tmp_path.iterdir()) == []


def test_readonly_goes_through(tmp_path: Path) -> None:
    with pytest.raises(StoreFileError, match=r"no chainlab database at 'missing\.db'"):
        open_store("missing.db", readonly=True)
    assert list(tmp_path.iterdir()) == []
    open_store("there.db").close()
    store = open_store("sqlite:///there.db", readonly=True)
    assert isinstance(store, SQLiteStore) and store.readonly
    store.close()
