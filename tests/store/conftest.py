from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chainlab.store import MemoryStore, SQLiteStore, Store
from chainlab.testing.store_contract import ev, record

__all__ = ["ev", "make_store", "record"]

STORE_KINDS = ["memory", "sqlite-file", "sqlite-memory", "postgres"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_store(kind: str, tmp_path: Path) -> Store:
    if kind == "postgres":  # a new schema of the session's server (tests/pg.py)
        from tests.pg import Unavailable, shared_cluster

        try:
            dsn = shared_cluster().dsn()
        except Unavailable as exc:
            pytest.skip(str(exc))
        from chainlab.store.postgres import PostgresStore

        return PostgresStore(dsn)
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite-file":
        return SQLiteStore(tmp_path / "store.db")
    return SQLiteStore(":memory:")


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = make_store(request.param, tmp_path)
    yield s
    s.close()
