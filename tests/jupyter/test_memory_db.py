"""``--db :memory:`` in the magics keeps runs in this kernel's memory (one MemoryStore for the
session) and never creates a file named ':memory:'; ``--db`` and CHAINLAB_DB go through
``chainlab.store.open_store``."""

from __future__ import annotations

import pytest

from chainlab.runtime import RunStatus
from chainlab.store import MemoryStore

from .conftest import Harness

pytestmark = pytest.mark.anyio


async def test_run_in_memory_creates_no_file(shop: Harness) -> None:
    before = sorted(p.name for p in shop.tmp_path.iterdir())
    await shop.ok("run = %chain run trip --db :memory:\nr = await run.wait()")
    assert shop.ns["r"].status == RunStatus.SUCCEEDED
    rid = shop.ns["run"].run_id
    assert not (shop.tmp_path / ":memory:").exists()
    assert sorted(p.name for p in shop.tmp_path.iterdir()) == before  # no file at all
    assert isinstance(shop.session.store(":memory:"), MemoryStore)
    # the same store for every magic of the session: the run is still there
    table = await shop.ok("%chain runs --db :memory:")
    assert repr(table).splitlines()[1].split()[:3] == [rid, "trip", "succeeded"]
    shop.displayed()
    await shop.ok(f"%chain show {rid} --db :memory:")
    assert shop.displayed() == [f"RunWidget(run {rid}, chain 'trip')"]
    assert not (shop.tmp_path / ":memory:").exists()


async def test_chainlab_db_memory_is_the_default_store(shop: Harness,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINLAB_DB", ":memory:")
    await shop.ok("run = %chain run trip\nawait run.wait()")
    assert isinstance(shop.session.store(), MemoryStore)
    assert list(shop.tmp_path.iterdir()) == []
    assert shop.session.store().get_run(shop.ns["run"].run_id).status == "succeeded"


async def test_store_urls(shop: Harness) -> None:
    await shop.ok("run = %chain run trip --db sqlite:///runs/x.db\nawait run.wait()")
    assert (shop.tmp_path / "runs" / "x.db").is_file()
    # a unix socket directory with no server in it: nothing leaves the machine
    url = f"postgresql://me:secret@/runs?host={shop.tmp_path / 'no-server'}"
    msg = await shop.usage_error(f"%chain runs --db {url}")
    assert "cannot reach the PostgreSQL server" in msg
    assert "secret" not in msg
