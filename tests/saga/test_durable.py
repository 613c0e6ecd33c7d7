"""Durable, resumable rollback on a SQLite file, with two runtimes (two "processes" sharing
the file) in one test process: rejection after a restart, a strict rollback resumed by
another runtime, and fencing of an old runtime that still runs a compensation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import CallContext, RunNotActiveError, StaleEpochError
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import SQLiteStore
from chainlab.testing import ManualClock

from .conftest import Saga, chain_of, statuses, step, until_idle

pytestmark = pytest.mark.anyio


class Stores:
    """SQLite stores on one file; each stands for one process's connection."""

    def __init__(self, path: Path):
        self.path = path
        self.open: list[SQLiteStore] = []

    def runtime(self, saga: Saga) -> Runtime:
        store = SQLiteStore(self.path)
        self.open.append(store)
        return Runtime(saga.toolbox, store, clock=ManualClock())


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    s = Stores(tmp_path / "saga.db")
    yield s
    for store in s.open:
        store.close()


async def test_reject_after_a_restart_rolls_back_from_the_stored_state(
        saga: Saga, stores: Stores) -> None:
    first = stores.runtime(saga)
    chain = chain_of(step("a"), step("b", ["a"]), step("pay", ["b"], confirm=True),
                     step("ship", ["pay"]))
    run = await first.start(chain, run_id="r-reject")
    assert (await run.wait()).status == RunStatus.SUSPENDED
    await first.aclose()  # the notebook kernel goes away; the run waits in the file

    second = stores.runtime(saga)
    run = await second.resume("r-reject")
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED and result.waiting == {
        "pay": "waiting_confirmation"}
    await run.reject("pay", "changed my mind")
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "compensated", "pay": "rejected",
                             "ship": "skipped"}
    assert [(u.name, u.epoch) for u in saga.undo_log] == [("b", 2), ("a", 2)]
    rows = stores.open[1].query(
        "SELECT step_id, attempt, kind, epoch, status FROM attempts "
        "WHERE run_id = 'r-reject' AND kind = 'compensation' ORDER BY step_id")
    assert rows == [("a", 1, "compensation", 2, "succeeded"),
                    ("b", 1, "compensation", 2, "succeeded")]
    await second.aclose()


async def test_strict_rollback_is_resumed_by_another_runtime(saga: Saga,
                                                            stores: Stores) -> None:
    saga.fail.add("d")
    saga.broken.add("b")
    first = stores.runtime(saga)
    chain = chain_of(step("a"), step("b", ["a"], after=["c"]), step("c", ["a"]),
                     step("d", ["b", "c"]), rollback_mode="strict")
    run = await first.start(chain, run_id="r-strict")
    run.subscribe(saga.watch)
    result = await run.wait()
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert statuses(run) == {"a": "succeeded", "b": "compensation_failed", "c": "succeeded",
                             "d": "failed"}
    await first.aclose()

    saga.broken.clear()  # the operator fixed the cause
    second = stores.runtime(saga)
    with pytest.raises(RunNotActiveError, match=r"runtime.resume\('r-strict'\)"):
        await second.get_run("r-strict").rollback()  # a read-only view cannot roll back
    run = await second.resume("r-strict")
    assert run.status == RunStatus.ROLLBACK_FAILED  # resuming alone changes nothing
    await run.rollback()
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "compensated", "c": "compensated",
                             "d": "failed"}
    assert [(u.name, u.attempt, u.epoch, u.ok) for u in saga.undo_log] == [
        ("b", 1, 1, False), ("b", 2, 1, False), ("b", 3, 1, False),
        ("b", 4, 2, True), ("c", 1, 2, True), ("a", 1, 2, True)]
    assert saga.world == set()
    keys = stores.open[1].query(
        "SELECT DISTINCT step_id, idempotency_key FROM attempts "
        "WHERE run_id = 'r-strict' AND kind = 'compensation'")
    assert sorted(keys) == sorted({(u.step_id, u.key) for u in saga.undo_log})
    assert stores.open[1].get_run("r-strict").status == "rolled_back"
    await second.aclose()


async def test_an_old_runtime_cannot_commit_after_another_took_the_rollback_over(
        saga: Saga, stores: Stores) -> None:
    in_old_call = anyio.Event()
    release_old = anyio.Event()
    calls: list[tuple[str, int, str]] = []

    async def undo(id: str, ctx: CallContext) -> None:
        calls.append((ctx.step_id, ctx.epoch, ctx.idempotency_key))
        if ctx.epoch == 1:  # the old runtime hangs in this call (a stuck API)
            in_old_call.set()
            await release_old.wait()

    saga.toolbox.tool(undo, side_effects=True, idempotent=True)
    rollback: dict[str, Any] = {"tool": "undo", "args": {"id": "{{ output.id }}"}}
    saga.fail.add("c")
    chain = chain_of(step("a", rollback=rollback), step("b", ["a"], rollback=rollback),
                     step("c", ["b"]))
    old = stores.runtime(saga)
    old_run = await old.start(chain, run_id="r-fence")
    await in_old_call.wait()

    new = stores.runtime(saga)
    run = await new.resume("r-fence", force=True)  # the old driver is alive: take over anyway
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    release_old.set()
    with anyio.fail_after(5), pytest.raises(StaleEpochError):
        await old_run.wait()

    # b: interrupted in epoch 1, repeated (same key) in epoch 2; a: only by the new runtime
    assert [(sid, epoch) for sid, epoch, _ in calls] == [("b", 1), ("b", 2), ("a", 2)]
    assert calls[0][2] == calls[1][2]
    store = stores.open[1]
    rows = store.query("SELECT step_id, attempt, epoch, status FROM attempts "
                       "WHERE run_id = 'r-fence' AND kind = 'compensation' "
                       "ORDER BY epoch, step_id DESC")
    assert rows == [("b", 1, 1, "interrupted"), ("b", 2, 2, "succeeded"),
                    ("a", 1, 2, "succeeded")]
    order = store.query("SELECT step_id FROM events WHERE run_id = 'r-fence' "
                        "AND kind = 'compensation_started' ORDER BY seq")
    assert order == [("b",), ("b",), ("a",)]
    claimed = next(e.seq for e in store.load_events("r-fence") if e.epoch == 2)
    assert all(e.epoch == 2 for e in store.load_events("r-fence") if e.seq >= claimed)
    assert store.get_run("r-fence").status == "rolled_back"
    await old.aclose()
    await new.aclose()


async def test_strict_rollback_stops_at_an_interrupted_unsafe_compensation(
        saga: Saga, stores: Stores) -> None:
    """After a crash, a compensation whose effect is unknown (not safe to repeat) counts as
    failed; strict mode must then stop there, not undo what completed before it."""
    in_old_call = anyio.Event()
    calls: list[tuple[str, int]] = []

    async def refund(id: str, ctx: CallContext) -> None:
        calls.append((ctx.step_id, ctx.epoch))
        if ctx.epoch == 1 and ctx.step_id == "b":
            in_old_call.set()
            await anyio.sleep_forever()  # the process dies in this call

    saga.toolbox.tool(refund, side_effects=True)  # NOT idempotent
    rollback: dict[str, Any] = {"tool": "refund", "args": {"id": "{{ output.id }}"}}
    saga.fail.add("d")
    chain = chain_of(step("a", rollback=rollback), step("b", ["a"], rollback=rollback),
                     step("c", ["b"], rollback=rollback), step("d", ["c"]),
                     rollback_mode="strict")
    old = stores.runtime(saga)
    await old.start(chain, run_id="r-strict-crash")
    await in_old_call.wait()
    await old.aclose()  # the old process is gone

    new = stores.runtime(saga)
    run = await new.resume("r-strict-crash")
    result = await run.wait()
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert calls == [("c", 1), ("b", 1)]  # a is NOT compensated behind b's back
    assert statuses(run) == {"a": "succeeded", "b": "compensation_failed",
                             "c": "compensated", "d": "failed"}
    end = stores.open[1].load_events("r-strict-crash")[-1]
    assert end.kind == "run_rollback_failed"
    assert end.payload["failed"] == ["b"] and end.payload["pending"] == ["a"]

    # the operator checked the payment provider; rollback() retries b, then a
    await until_idle(run)
    await run.rollback()
    assert (await run.wait()).status == RunStatus.ROLLED_BACK
    assert calls[2:] == [("b", 2), ("a", 2)]
    await new.aclose()
