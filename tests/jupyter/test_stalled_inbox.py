"""``%chain approvals`` (the team inbox) says which runs stand still with no decision on a
step to make (issue 44), above the cards: a run left running with nobody driving it (its
driver row stale: written from "another host" a while ago) names ``%chain resume RUN``; a
queued run behind the run holding its concurrency key says which run and what that run
waits for (its in-doubt step, whose card is in the inbox)."""

from __future__ import annotations

import html
import sqlite3
from pathlib import Path

import anyio
import pytest

from chainlab.jupyter.remote import ApprovalsInbox
from chainlab.jupyter.run_widget.inbox import DoubtCard
from chainlab.runtime import Runtime, new_worker
from chainlab.store import SQLiteStore
from tests.workers.test_fleet_local import running, settled
from tests.workers.test_stalled_runs import HOLD, PAY, shop

from .conftest import Harness

pytestmark = pytest.mark.anyio


async def test_the_inbox_says_which_runs_stand_still_and_what_moves_them(
        sh: Harness, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    async with Runtime(shop(), store) as desk:
        first, second = [await desk.enqueue(PAY, {"customer": "ada"}, queue="q")
                         for _ in range(2)]
    async with running(new_worker(shop(), store, queues=["q"])):
        await settled(store, [first], done=lambda s: s == "suspended")  # pay is in doubt
    gate = anyio.Event()
    # a driver that beats rarely; its row is then made to look like a lapsed driver's
    async with Runtime(shop(gate), store, heartbeat_s=50, stale_after_s=100) as driver:
        held = await driver.start(HOLD)
        with anyio.fail_after(10):
            while store.get_run(held.run_id).driver is None:
                await anyio.sleep(0.02)
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE drivers SET host = 'elsewhere', beat_at = beat_at - 300 "
                         "WHERE run_id = ?", (held.run_id,))
        inbox = await sh.ok(f"%chain approvals --db '{db}'")
        assert isinstance(inbox, ApprovalsInbox)
        shown = html.unescape(inbox.stalls.value)
        assert f"run {held.run_id} is running, but nobody drives it: its driver, pid " \
            in shown and "on host 'elsewhere'" in shown
        assert f"<code>%chain resume {held.run_id}</code>" in shown
        assert (f"run {second} is queued: its concurrency key 'customer:ada' is held by run "
                f"{first}, which is suspended: its step 'pay' is in doubt") in shown
        assert "resolve step pay of its card below" in shown
        assert isinstance(inbox.card(first, "pay"), DoubtCard)
        assert inbox.children.index(inbox.stalls) < inbox.children.index(inbox.list)
        gate.set()
        assert (await held.wait()).ok
        inbox.refresh()
        assert held.run_id not in inbox.stalls.value and second in inbox.stalls.value
    store.close()
