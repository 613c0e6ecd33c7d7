"""Runs that stand still with no step waiting for a decision (issue 44): a run in progress
whose driver is gone (its heartbeat lapsed: the clock is injected) and a queued run whose
concurrency key another run holds. :mod:`chainlab.runtime.coordination.stalls` says so and
names what moves each on; ``chainlab runs`` and ``chainlab approvals`` print it (a real
subprocess over the same SQLite file; ``tests/cli/test_stalled_runs.py`` kills a real
``chainlab approve --all`` for the first case)."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime, new_worker
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.runtime.coordination.stalls import stall_of, stalls
from chainlab.store import SQLiteStore
from tests.cli.helpers import chainlab

from .test_fleet_local import running, settled

pytestmark = pytest.mark.anyio


def shop(gate: anyio.Event | None = None) -> Toolbox:
    tb = Toolbox("stalls")

    @tb.tool
    async def hold() -> str:
        if gate is not None:
            await gate.wait()
        return "held"

    @tb.tool(side_effects=True)  # not idempotent: an unknown outcome is in doubt
    def pay(customer: str) -> str:
        raise ConnectionResetError(f"connection reset while paying {customer}")

    return tb


HOLD = Chain.from_dict({"name": "hold", "steps": [{"id": "hold", "tool": "hold"}]})
PAY = Chain.from_dict({
    "name": "pay", "options": {"concurrency_key": "customer:{{ context.customer }}"},
    "steps": [{"id": "pay", "tool": "pay", "args": {"customer": "{{ context.customer }}"}}]})


async def test_a_running_run_whose_driver_lapsed_names_resume(tmp_path: Path) -> None:
    gate = anyio.Event()
    store = SQLiteStore(tmp_path / "runs.db")
    async with Runtime(shop(gate), store) as driver:
        run = await driver.start(HOLD)
        with anyio.fail_after(10):
            while store.get_run(run.run_id).driver is None:  # its first heartbeat
                await anyio.sleep(0.02)
        elsewhere = Liveness()  # another process's view: the default rule (10 s)
        assert stall_of(store, elsewhere, run.run_id) is None  # it beats: it is driven
        assert stall_of(store, driver.liveness, run.run_id) is None  # driven HERE
        later = time.time() + 60  # no beat for a minute (a frozen or killed driver)
        stall = stall_of(store, elsewhere, run.run_id, now=later)
        assert stall is not None and stall.kind == "no_driver"
        pid = store.get_run(run.run_id).driver.pid  # type: ignore[union-attr]
        assert stall.text.startswith(f"run {run.run_id} is running, but nobody drives it: "
                                     f"its driver, pid {pid} on host ")
        assert "is gone (no heartbeat for 6" in stall.text
        assert stall.command() == f"chainlab resume {run.run_id}"
        assert [s.run_id for s in stalls(store, elsewhere, now=later)] == [run.run_id]
        gate.set()
        assert (await run.wait()).ok
        assert stall_of(store, elsewhere, run.run_id, now=later) is None  # it ended
    store.close()


async def test_a_queued_run_says_which_run_holds_its_key_and_what_that_run_waits_for(
        tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    async with Runtime(shop(), store) as desk:
        first, second = [await desk.enqueue(PAY, {"customer": "ada"}, queue="q")
                         for _ in range(2)]
    worker = new_worker(shop(), store, queues=["q"])
    async with running(worker):
        await settled(store, [first], done=lambda s: s == "suspended")  # pay is in doubt
    assert store.get_run(second).status == "queued"  # its key is held by the first
    [stall] = stalls(store, Liveness())
    said = (f"run {second} is queued: its concurrency key 'customer:ada' is held by run "
            f"{first}, which is suspended: its step 'pay' is in doubt; it starts when that "
            "run ends")
    assert (stall.run_id, stall.kind, stall.key, stall.holder) == (
        second, "key_held", "customer:ada", first)
    assert stall.text == said
    assert stall.command() == f"chainlab resolve {first} pay"
    store.close()
    # where a person looks: chainlab runs (and --json) and chainlab approvals
    listed = chainlab("runs", "--db", str(db), cwd=tmp_path)
    assert listed.code == 0 and said in listed.out, listed.out
    assert f"move {first} on: chainlab resolve {first} pay --db" in listed.out
    [queued] = [r for r in chainlab("runs", "--db", str(db), "--json", cwd=tmp_path).json
                if r["run_id"] == second]
    assert queued["stalled"]["holder"] == first and queued["stalled"]["kind"] == "key_held"
    inbox = chainlab("approvals", "--db", str(db), cwd=tmp_path)
    assert inbox.code == 0 and said in inbox.out and "in doubt" in inbox.out, inbox.out
