"""A log written before turns stored only what they add (issue 49 item 1): each turn's
``step_started`` then held the whole request (``"request": body``, no ``frame``). Such a
run still resumes (its next turn asks what it would have asked), replays and exports: the
request is taken from the event as it was stored."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from chainlab.agent.model import request_hash
from chainlab.agent.turns import turn_requests
from chainlab.events import RunState
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.export import export_test
from chainlab.testing.replay import Recording, replay_run
from tests.replay.test_agent_replay import CHAIN, shop  # noqa: F401 (a fixture)
from tests.replay.test_export import pytest_in

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("export-test")]


def rewrite_the_old_way(db: Path, run_id: str) -> list[dict]:
    """Each turn's ``step_started`` as chainlab wrote it before (main at 107b603,
    engine/attempt/agent: ``{"args", "tool", "turn", "request_hash", "request", "code"}``);
    returns the requests so written."""
    with SQLiteStore(db) as store:
        events = store.load_events(run_id)
        state = RunState.from_events(run_id, events)
        asked = list(turn_requests(state, events))
    written = []
    with sqlite3.connect(db) as conn:
        for ev, body in asked:
            p = ev.payload
            assert request_hash(body) == p["request_hash"]
            old = {"args": p["args"], "tool": p["tool"], "turn": p["turn"],
                   "request_hash": p["request_hash"], "request": body, "code": p["code"]}
            conn.execute("UPDATE events SET payload = ? WHERE run_id = ? AND seq = ?",
                         (json.dumps(old), run_id, ev.seq))
            written.append(body)
    return written


async def suspended_old_run(module: ModuleType, db: Path) -> tuple[str, list[dict]]:
    runtime = Runtime(module.toolbox, SQLiteStore(db))
    run = await runtime.start(CHAIN, {"ask": "order 7 arrived broken, refund 50"})
    assert (await run.wait()).status == RunStatus.SUSPENDED  # refund 50 waits for a person
    await runtime.aclose()
    runtime.store.close()
    return run.run_id, rewrite_the_old_way(db, run.run_id)


async def finish(module: ModuleType, db: Path, run_id: str) -> None:
    """Resume the old-format run in a new runtime and take it to its end."""
    runtime = Runtime(module.toolbox, SQLiteStore(db))
    run = await runtime.resume(run_id)
    await run.reject("help/1.2", "50 is more than the order's total")
    await run.wait()
    await run.approve("help/2.1")
    assert (await run.wait()).ok
    await runtime.aclose()
    runtime.store.close()


async def test_an_old_format_run_resumes_and_replays(shop: tuple[ModuleType, Path]  # noqa: F811
                                                     ) -> None:
    module, tmp_path = shop
    db = tmp_path / "runs.db"
    run_id, old = await suspended_old_run(module, db)
    with sqlite3.connect(db) as conn:
        payloads = [json.loads(p) for (p,) in conn.execute(
            "SELECT payload FROM events WHERE kind = 'step_started' AND step_id = 'help'")]
    assert ["request" in p and "frame" not in p for p in payloads] == [True]
    await finish(module, db, run_id)
    with SQLiteStore(db) as store:
        recording = Recording.from_store(store, run_id)
    assert [t["turn"] for t in recording.turns] == [1, 2, 3]
    assert recording.turns[0]["request"] == old[0]  # the old turn: its stored request
    # the turns asked after the resume hash as recorded, rebuilt from the mixed log
    assert all(request_hash(t["request"]) == t["request_hash"] for t in recording.turns)
    replayed = await replay_run(recording, module.toolbox)
    replayed.assert_same()


def test_an_old_format_run_exports_a_test_that_passes(
        shop: tuple[ModuleType, Path]) -> None:  # noqa: F811
    module, tmp_path = shop
    db = tmp_path / "runs.db"
    run_id, _ = anyio.run(suspended_old_run, module, db)
    anyio.run(finish, module, db, run_id)
    with SQLiteStore(db) as store:
        exported = export_test(store, run_id, tmp_path / "tests" / "test_support.py",
                               tools="support_shop:toolbox", toolbox=module.toolbox)
    ok = pytest_in(tmp_path, exported.test)
    assert ok.returncode == 0, ok.stdout + ok.stderr
