"""The worker fleet in one process (DESIGN §19): workers over one SQLite file, each with its
own runtime (tests/workers/test_fleet_processes.py has real processes on PostgreSQL).

A fair share between queues and no starvation of an old run; one run per key at a time;
a queue's limit across workers; a toolbox that lacks a tool leaves the run to another
worker and says so; a decision on a queue's run from anywhere is recorded and applied by
the fleet (the deciding process never drives it); a drain lets running steps finish and
claims nothing new, a second drain hands the runs back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import UnknownStepError
from chainlab.runtime import Runtime, Worker, new_worker
from chainlab.store import SQLiteStore
from tests.workers.procs import max_overlap, segments

pytestmark = pytest.mark.anyio


def tools(*, slow: float = 0.0, without: str | None = None) -> Toolbox:
    tb = Toolbox("local-fleet")

    @tb.tool
    async def work(tag: str) -> str:
        await anyio.sleep(slow)
        return tag

    async def charge(tag: str, big: bool = False) -> str:
        await anyio.sleep(slow)
        return f"charged {tag}"

    if without != "charge":  # a worker started with an older toolbox lacks it
        tb.tool(side_effects=True,
                requires_confirmation=lambda args: args.get("big", False))(charge)
    return tb


def chain(*, key: bool = False, big: bool = False) -> Chain:
    return Chain.from_dict({
        "name": "job",
        "options": {"concurrency_key": "k:{{ context.key }}"} if key else {},
        "steps": [{"id": "work", "tool": "work", "args": {"tag": "{{ context.tag }}"}},
                  {"id": "charge", "tool": "charge",
                   "args": {"tag": "{{ steps.work.output }}", "big": big}}]})


@asynccontextmanager
async def running(*workers: Worker) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        for w in workers:
            tg.start_soon(w.run)
        yield
        for w in workers:
            w.drain()
            w.drain()


async def settled(store: Any, run_ids: list[str], timeout: float = 30.0,
                  done: Callable[[str], bool] | None = None) -> None:
    with anyio.fail_after(timeout):
        while not all((done or (lambda s: s == "succeeded"))(store.get_run(r).status)
                      for r in run_ids):
            await anyio.sleep(0.02)


async def enqueue(store: Any, c: Chain, contexts: list[dict[str, Any]], queue: str = "q"
                  ) -> list[str]:
    async with Runtime(tools(), store) as rt:
        return [await rt.enqueue(c, ctx, queue=queue) for ctx in contexts]


def started_order(store: Any, run_ids: list[str]) -> list[str]:
    first = {r: store.load_events(r)[0].ts for r in run_ids}
    return sorted(run_ids, key=first.__getitem__)


async def test_a_fair_share_between_queues_and_no_starvation(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    bulk = await enqueue(store, chain(), [{"tag": f"b{i}"} for i in range(12)], "bulk")
    vip = await enqueue(store, chain(), [{"tag": f"v{i}"} for i in range(3)], "vip")
    worker = new_worker(tools(), store, queues=["bulk", "vip"], concurrency=1)
    async with running(worker):
        await settled(store, bulk + vip)
    order = started_order(store, bulk + vip)
    assert set(order[:6]) == set(bulk[:3]) | set(vip)  # turns: bulk, vip, bulk, vip, ...
    assert [r for r in order if r in bulk] == bulk  # inside a queue, oldest first
    store.close()


async def test_one_run_per_key_and_the_oldest_waiter_goes_first(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    keyed, plain = chain(key=True), chain()
    a1, a2 = await enqueue(store, keyed, [{"tag": "a1", "key": "ada"},
                                          {"tag": "a2", "key": "ada"}])
    others = await enqueue(store, plain, [{"tag": f"o{i}"} for i in range(4)])
    [a3] = await enqueue(store, keyed, [{"tag": "a3", "key": "ada"}])
    workers = [new_worker(tools(slow=0.05), store, queues=["q"], concurrency=2)
               for _ in range(2)]
    async with running(*workers):
        await settled(store, [a1, a2, a3, *others])
    ada = [(s[0], s[1]) for r in (a1, a2, a3) for s in segments(store.load_events(r))]
    assert max_overlap(ada) == 1  # never two runs of one key at once
    order = started_order(store, [a1, a2, a3])
    assert order == [a1, a2, a3]
    store.close()


async def test_a_queue_limit_holds_across_workers(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store.set_queue_limit("q", 2)
    run_ids = await enqueue(store, chain(), [{"tag": f"r{i}"} for i in range(10)])
    workers = [new_worker(tools(slow=0.03), store, queues=["q"], concurrency=3)
               for _ in range(2)]
    async with running(*workers):
        await settled(store, run_ids)
    spans = [(a, b) for r in run_ids for a, b, _ in segments(store.load_events(r))
             if b is not None]
    assert max_overlap(spans) == 2
    assert sum(w.claims for w in workers) == 10
    store.close()


async def test_a_worker_without_a_tool_leaves_the_run_to_another(tmp_path: Path) -> None:
    from chainlab.cli.commands.fleet import worker_rows

    store = SQLiteStore(tmp_path / "runs.db")
    [run_id] = await enqueue(store, chain(), [{"tag": "x"}])
    lacking = new_worker(tools(without="charge"), store, name="lacking", queues=["q"])
    async with running(lacking):
        with anyio.fail_after(10):
            while not any("cannot run" in w.note for w in store.list_workers()):
                await anyio.sleep(0.02)
        [row] = worker_rows(store.list_workers(), 5.0)
        assert row["name"] == "lacking" and "'charge'" in row["note"], row
        record = store.get_run(run_id)
        assert (record.status, record.driver) == ("queued", None)  # handed back untouched
        assert store.load_events(run_id) == []
        able = new_worker(tools(), store, name="able", queues=["q"])
        async with running(able):
            await settled(store, [run_id])
    assert lacking.claims == 0 and able.claims == 1
    store.close()


async def test_a_decision_from_anywhere_is_left_to_the_fleet(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    [run_id] = await enqueue(store, chain(big=True), [{"tag": "big"}])
    worker = new_worker(tools(), store, name="w1", queues=["q"])
    async with running(worker):
        await settled(store, [run_id], done=lambda s: s == "suspended")
        with anyio.fail_after(10):  # released: a suspended run holds no worker
            while store.get_run(run_id).driver is not None:
                await anyio.sleep(0.02)
        async with Runtime(tools(), SQLiteStore(tmp_path / "runs.db")) as desk:
            with pytest.raises(UnknownStepError):
                await desk.decide(run_id, "chrage", "approve")  # refused at once
            stored = desk.get_run(run_id)  # a stored handle
            await stored.approve("charge", note="ok from the desk")
            assert desk.driven(run_id) is None  # it never drove the run
        await settled(store, [run_id])
    resumed = [ev.payload for ev in store.load_events(run_id) if str(ev.kind) == "run_resumed"]
    assert resumed[0]["worker"]["name"] == "w1"
    approved = [ev.payload for ev in store.load_events(run_id)
                if str(ev.kind) == "step_approved"]
    assert approved[0]["note"] == "ok from the desk"
    store.close()


async def test_a_decision_with_no_worker_is_recorded_until_one_runs(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    [run_id] = await enqueue(store, chain(big=True), [{"tag": "big"}])
    worker = new_worker(tools(), store, queues=["q"])
    async with running(worker):
        await settled(store, [run_id], done=lambda s: s == "suspended")
    async with Runtime(tools(), store) as desk:
        assert await desk.decide(run_id, "charge", "approve", timeout=0.3) == "recorded"
    assert store.get_run(run_id).status == "suspended" and store.pending_requests(run_id)
    again = new_worker(tools(), store, queues=["q"])
    async with running(again):
        await settled(store, [run_id])
    [request] = [store.get_request(1)]
    assert request.outcome == "applied"
    store.close()


async def test_a_drain_claims_nothing_new_and_a_second_hands_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    first, second = await enqueue(store, chain(), [{"tag": "a"}, {"tag": "b"}])
    worker = new_worker(tools(slow=0.5), store, name="draining", queues=["q"],
                        concurrency=1, drain_s=10.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(10):
            while not worker.running:
                await anyio.sleep(0.01)
        worker.drain()  # the running step finishes; the run goes on to its end
    assert store.get_run(first).status == "succeeded"
    assert store.get_run(second).status == "queued"  # nothing new was claimed
    # a second drain hands back at once: the next worker takes the run over
    slow = new_worker(tools(slow=5.0), store, name="slow", queues=["q"], concurrency=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(slow.run)
        with anyio.fail_after(10):
            while not slow.running:
                await anyio.sleep(0.01)
        began = time.monotonic()
        slow.drain()
        slow.drain()
    assert time.monotonic() - began < 4.0  # it did not wait for the 5 s call
    record = store.get_run(second)
    assert record.status == "running" and record.driver is None  # handed back
    taker = new_worker(tools(), store, name="taker", queues=["q"])
    async with running(taker):
        await settled(store, [second])
    kinds = [(str(ev.kind), ev.payload.get("worker", {}).get("name"))
             for ev in store.load_events(second) if str(ev.kind).startswith("run_")]
    assert kinds[0] == ("run_started", "slow") and ("run_resumed", "taker") in kinds
    store.close()
