"""Driver liveness and decisions through the store, in one process with two runtimes on
two store objects of ONE database (SQLite file, PostgreSQL): runtime A drives, runtime B
decides or takes over (DESIGN §13). The cross-process versions are in
tests/durability/test_decide_remote.py."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab.errors import (
    DecisionError,
    DecisionTimeoutError,
    DriverAliveError,
    RunStateError,
    StaleEpochError,
)
from chainlab.events import EventKind, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import DecisionRequest, MemoryStore, Store, open_store
from tests.durability.decide_driver import chain, make_toolbox, read_ledger
from tests.store.test_watch import store_url

pytestmark = pytest.mark.anyio
# beats every 50 ms; a driver counts as dead after 3 s without one (room for a loaded
# machine: a driver that is alive must never look dead here), 0.5 s where staleness is tested
FAST: dict[str, Any] = {"heartbeat_s": 0.05, "stale_after_s": 3.0, "mailbox_poll_s": 0.02}
QUICK_TO_JUDGE: dict[str, Any] = {**FAST, "stale_after_s": 0.5}


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Store, Store]]:
    monkeypatch.setenv("CHAINLAB_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    url = store_url(request.param, tmp_path)
    a, b = open_store(url), open_store(url)
    yield a, b
    a.close()
    b.close()


async def driven(runtime: Runtime, run_id: str = "r1") -> Any:
    """Start the pay-once chain in ``runtime`` and wait until it waits for ``pay`` IN THE
    STORE (the handle's status runs ahead of the group-committed log: a driver cancelled
    right after the handle said "suspended" could leave a log in which ``pay`` was never
    asked for, and a takeover then asks again, asynchronously) and its heartbeat is there."""
    run = await runtime.start(chain(), {}, run_id=run_id)

    def stored_suspended() -> bool:
        kinds = [e.kind for e in runtime.store.load_events(run_id)]
        return EventKind.RUN_SUSPENDED in kinds

    with anyio.fail_after(30):
        while run.status != RunStatus.SUSPENDED or runtime.store.driver_of(run_id) is None \
                or not stored_suspended():
            await anyio.sleep(0.01)
    return run


def pays(tmp_path: Path) -> list[dict[str, Any]]:
    return [e for e in read_ledger(tmp_path / "ledger.jsonl") if e["tool"] == "pay"]


async def test_a_decision_reaches_the_live_driver_through_the_store(
        stores: tuple[Store, Store], tmp_path: Path) -> None:
    async with Runtime(make_toolbox(), stores[0], **FAST) as a, \
            Runtime(make_toolbox(), stores[1], **FAST) as b:
        run = await driven(a)
        driver = b.store.driver_of("r1")
        assert driver is not None and (driver.host, driver.pid) == (socket.gethostname(),
                                                                    os.getpid())
        assert driver.driver_id == a.liveness.driver_id != b.liveness.driver_id
        assert await b.decide("r1", "pay", "approve", by="bob", note="fine") == "applied"
        assert not b.get_run("r1").active  # B did not take the run over
        result = await run.wait()
        assert result.ok and result.outputs["after"] == 4
        approved = [e for e in run.event_list() if e.kind == EventKind.STEP_APPROVED]
        assert [(e.step_id, e.epoch, e.payload.get("note")) for e in approved] == [
            ("pay", 1, "fine")]
        assert [e["pid"] for e in pays(tmp_path)] == [os.getpid()]
        (request,) = [b.store.get_request(i) for i in range(1, 50)
                      if _exists(b.store, i)]
        assert (request.action, request.by, request.outcome) == ("approve", "bob", "applied")


def _exists(store: Store, request_id: int) -> bool:
    try:
        store.get_request(request_id)
    except Exception:
        return False
    return True


async def test_a_decision_that_ends_the_run_is_still_answered(
        stores: tuple[Store, Store]) -> None:
    """Rejecting the step a run waits for ends the run, and so the driver's mailbox task;
    the answer was cancelled with it and the decider waited in vain (DecisionTimeoutError)."""
    for round_ in range(3):
        async with Runtime(make_toolbox(), stores[0], **FAST) as a, \
                Runtime(make_toolbox(), stores[1], **FAST) as b:
            run = await driven(a, run_id=f"end{round_}")
            assert await b.decide(f"end{round_}", "pay", "reject", reason="no",
                                  timeout=10) == "applied"
            result = await run.wait()
            assert result.status == RunStatus.FAILED and run.steps["pay"].status == "rejected"


async def test_a_refused_request_reports_the_drivers_message(
        stores: tuple[Store, Store]) -> None:
    async with Runtime(make_toolbox(), stores[0], **FAST) as a, \
            Runtime(make_toolbox(), stores[1], **FAST) as b:
        run = await driven(a)
        with pytest.raises(DecisionError) as info:
            await b.decide("r1", "prep", "approve")
        # the words of decisions.check, run by the driver on its own state
        assert "cannot approve step 'prep' of run 'r1': it is succeeded, not " \
               "waiting_confirmation (waiting_confirmation: pay)" in str(info.value)
        assert (info.value.step_id, info.value.run_id) == ("prep", "r1")
        with pytest.raises(DecisionError, match=r"no step 'pya'.*did you mean 'pay'"):
            await b.decide("r1", "pya", "reject", reason="typo")
        with pytest.raises(ValueError, match="reject takes reason; got args"):
            await b.decide("r1", "pay", "reject", args={"amount": 1})
        assert run.status == RunStatus.SUSPENDED and run.active  # still A's, untouched


async def test_a_driver_that_does_not_answer_is_named(stores: tuple[Store, Store]) -> None:
    a = Runtime(make_toolbox(), stores[0], **FAST)
    async with Runtime(make_toolbox(), stores[1], **FAST) as b:
        await driven(a)
        # A beats but its mailbox is not read: a driver blocked in a long call, say
        stores[0].pending_requests = lambda run_id, after_id=0: []  # type: ignore[method-assign]
        with pytest.raises(DecisionTimeoutError) as info:
            await b.decide("r1", "pay", "approve", timeout=0.3)
        assert (info.value.pid, info.value.host) == (os.getpid(), socket.gethostname())
        assert f"pid {os.getpid()} on host {socket.gethostname()!r}" in str(info.value)
        assert "did not answer decision request" in str(info.value)
        await a.aclose()


async def test_resume_refuses_a_live_driver_and_force_fences_it(
        stores: tuple[Store, Store], tmp_path: Path) -> None:
    async with Runtime(make_toolbox(), stores[0], **FAST) as a, \
            Runtime(make_toolbox(), stores[1], **FAST) as b:
        run_a = await driven(a)
        with pytest.raises(DriverAliveError) as info:
            await b.resume("r1")
        err = info.value
        assert (err.pid, err.host, err.epoch) == (os.getpid(), socket.gethostname(), 1)
        assert 0 <= err.beat_age_s < 3.0
        assert f"pid {os.getpid()} on host {socket.gethostname()!r} (epoch 1)" in str(err)
        assert "force=True / --force" in str(err) and isinstance(err, RunStateError)

        run_b = await b.resume("r1", force=True)
        claimed = run_b.state.last_seq
        # the old driver tries to go on: its approval is refused by the store, and the
        # side-effecting call it would release is never made (write-ahead flush fails)
        with pytest.raises(StaleEpochError):
            await run_a.approve("pay")
        with anyio.fail_after(10), pytest.raises(StaleEpochError):
            while True:  # until A's worker meets the fence at its write-ahead flush
                await run_a.wait()
                await anyio.sleep(0.01)
        await run_b.approve("pay")
        assert (await run_b.wait()).ok
        events = run_b.event_list()
        assert all(e.epoch == 2 for e in events if e.seq > claimed)
        assert not any(e.epoch == 1 and e.kind == EventKind.STEP_APPROVED for e in events)
        assert [e["pid"] for e in pays(tmp_path)] == [os.getpid()]  # once, by B
        # the fenced driver forgets itself when its drive has unwound (its wait() raised
        # before that); B may have beat since
        with anyio.fail_after(5):
            while (driver := stores[1].driver_of("r1")) is not None and (
                driver.driver_id != b.liveness.driver_id
            ):
                await anyio.sleep(0.01)


async def test_a_stale_driver_is_taken_over_and_a_closed_one_at_once(
        stores: tuple[Store, Store]) -> None:
    a = Runtime(make_toolbox(), stores[0], **FAST)
    await driven(a)
    # a driver that stops beating without saying so (its process hung or died)
    for task in list(a.host._tasks):
        task.cancel()
    stores[0].heartbeat = lambda *args: None  # type: ignore[method-assign]
    stores[0].clear_driver = lambda *args: None  # type: ignore[method-assign]
    await anyio.sleep(0)
    async with Runtime(make_toolbox(), stores[1], **QUICK_TO_JUDGE) as b:
        with anyio.fail_after(10):
            while True:
                try:
                    run = await b.resume("r1")
                    break
                except DriverAliveError:
                    await anyio.sleep(0.05)
        await run.approve("pay")
        assert (await run.wait()).ok
    async with Runtime(make_toolbox(), stores[1], **FAST) as c:  # cleanly closed: at once
        await driven(c, "r2")  # suspended IN THE STORE: the handle's status runs ahead
    assert stores[1].driver_of("r2") is None
    async with Runtime(make_toolbox(), stores[1], **FAST) as d:
        assert await d.decide("r2", "pay", "approve") == "applied"
        assert d.get_run("r2").active  # taken over, applied, driven here
        assert (await d.get_run("r2").wait()).ok


async def test_decide_on_a_run_this_runtime_drives_applies_it_directly() -> None:
    async with Runtime(make_toolbox(), MemoryStore(), **FAST) as rt:
        run = await rt.start(chain(), {}, run_id="m1")
        with anyio.fail_after(30):
            while run.status != RunStatus.SUSPENDED:
                await anyio.sleep(0.01)
        assert await rt.decide("m1", "pay", "approve") == "applied"
        assert (await run.wait()).ok
        assert rt.store.pending_requests("m1") == []  # nothing went through the mailbox


def test_decide_sync_takes_over_a_run_nobody_drives_and_drives_it_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINLAB_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    store = open_store(str(tmp_path / "runs.db"))

    async def leave_suspended() -> None:
        async with Runtime(make_toolbox(), store) as first:
            run = await first.start(chain(), {}, run_id="s1")
            assert (await run.wait()).suspended  # then the process goes away

    anyio.run(leave_suspended)
    assert store.driver_of("s1") is None  # a driver that closed cleanly forgot itself
    runtime = Runtime(make_toolbox(), store)
    # checked on the stored state before the claim: nothing is taken over (the same words
    # as a live driver's refusal, which comes as a DecisionError, also a RunStateError)
    with pytest.raises(RunStateError, match="cannot reject step 'prep'"):
        runtime.decide_sync("s1", "prep", "reject", reason="no")
    assert store.get_run("s1").epoch == 1
    assert runtime.decide_sync("s1", "pay", "approve", note="from a script") == "applied"
    assert store.get_run("s1").status == RunStatus.SUCCEEDED  # driven to its end here
    assert [e["pid"] for e in pays(tmp_path)] == [os.getpid()]
    store.close()


async def test_a_request_nobody_waits_for_any_more_is_refused_as_expired() -> None:
    store = MemoryStore()  # two runtimes of one process share it, as two processes would
    async with Runtime(make_toolbox(), store, **FAST) as a:
        run = await driven(a, "e1")
        stale = store.post_request("e1", DecisionRequest(
            run_id="e1", step_id="pay", action="approve", by="gone", created_at=1.0,
            expires_at=2.0))
        with anyio.fail_after(10):
            while store.get_request(stale).outcome is None:
                await anyio.sleep(0.01)
        answer = store.get_request(stale)
        assert answer.outcome == "refused" and answer.message is not None
        assert answer.message.startswith(f"expired: request {stale} reached the driver")
        assert run.steps["pay"].status == "waiting_confirmation"  # not applied
