"""``GET /approvals`` lists, under ``stalled``, the runs that stand still with no step to
decide (issue 44): a run in progress whose driver is gone (its row made stale: written from
"another host" a while ago) with the move ``resume``. The app in process (Starlette's test
client), over the SQLite file the driving runtime uses."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from chainlab.http import create_app
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from tests.workers.test_stalled_runs import HOLD, shop

pytestmark = pytest.mark.anyio


async def test_the_inbox_lists_a_run_nobody_drives_with_resume(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    db = tmp_path / "runs.db"
    gate = anyio.Event()
    store = SQLiteStore(db)
    async with Runtime(shop(gate), store, heartbeat_s=50, stale_after_s=100) as driver:
        held = await driver.start(HOLD)
        with anyio.fail_after(10):
            while store.get_run(held.run_id).driver is None:
                await anyio.sleep(0.02)
        headers = {"Authorization": "Bearer t0ken"}
        with TestClient(create_app(shop(), token="t0ken", db=str(db))) as client:
            before = client.get("/approvals", headers=headers).json()
            assert before == {"waiting": [], "stalled": []}  # its driver beats: driven
            with sqlite3.connect(db) as conn:
                conn.execute("UPDATE drivers SET host = 'elsewhere', beat_at = beat_at - 300 "
                             "WHERE run_id = ?", (held.run_id,))
            body = client.get("/approvals", headers=headers).json()
        [stalled] = body["stalled"]
        assert (stalled["run_id"], stalled["kind"], stalled["action"],
                stalled["action_run"]) == (held.run_id, "no_driver", "resume", held.run_id)
        assert stalled["text"].startswith(f"run {held.run_id} is running, but nobody drives "
                                          "it: its driver, pid ")
        assert "on host 'elsewhere'" in stalled["text"]
        gate.set()
        assert (await held.wait()).ok
    store.close()
