from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chainlab.store import Event, MemoryStore, RunRecord, SQLiteStore, Store

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


def ev(seq: int, kind: str = "step_ready", *, epoch: int = 1, run_id: str = "r1",
       step_id: str | None = "a", payload: dict[str, Any] | None = None) -> Event:
    """An event with ts = 1000 + seq."""
    return Event(run_id, seq, 1000.0 + seq, epoch, kind, step_id, None, payload or {})


def record(run_id: str = "r1", *, created_at: float = 100.0, epoch: int = 1,
           status: str = "running") -> RunRecord:
    return RunRecord(run_id=run_id, chain_name="c", status=status, epoch=epoch,
                     created_at=created_at, updated_at=created_at,
                     chain={"name": "c", "steps": [{"id": "a", "tool": "t"}]},
                     chains={"sub": {"name": "sub"}}, context={"k": [1, "two", None]},
                     options={"max_concurrency": 2}, meta={"who": "test"})
