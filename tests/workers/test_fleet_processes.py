"""A worker fleet on PostgreSQL with real processes (DESIGN §19, issue 39): ``chainlab
worker`` processes drain a backlog of queued runs while the test SIGKILLs workers (and
restarts them under the same name) and freezes others with SIGSTOP past their lapse, then
continues them (zombies); a person's approvals and in-doubt resolutions are sent from this
process (``runtime.decide``: recorded, applied by the fleet).

Checked at the end, from the event log and the ledger (tests/workers/procs.py): every run
ended; every non-idempotent charge happened exactly once (in_doubt where its outcome was
unknown, resolved from the ledger, never repeated); a step that needed approval took effect
only after it; no epoch wrote after a newer one, and no fenced epoch started a call after
the takeover; the queue limit, the per-key limit and each worker's concurrency were never
exceeded; nothing is left queued or running.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab.errors import ChainlabError
from chainlab.runtime import Runtime
from chainlab.runtime.coordination.liveness import pid_alive
from tests.workers.fleet_tools import ORDER, toolbox
from tests.workers.procs import (
    Fleet,
    check_fleet_log,
    check_ledger,
    pg_url,
    unfinished,
    wait_for,
)

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.xdist_group("durability-processes")

SEED = int(os.environ.get("CHAINLAB_FLEET_SEED") or 39)
RUNS = int(os.environ.get("CHAINLAB_FLEET_RUNS") or 36)


@pytest.fixture
def store_url() -> str:
    return pg_url(f"fleet{os.getpid()}_{time.monotonic_ns() % 10**9}")


@pytest.fixture
def fleet(store_url: str, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(store_url, tmp_path)
    yield f
    f.close()


def open_pg(url: str) -> Any:
    from chainlab.store.postgres import PostgresStore

    return PostgresStore(url)


async def operate(runtime: Runtime, run_ids: list[str], ledger: Any) -> int:
    """One pass of the person at the desk: approve what waits for confirmation, resolve
    what is in doubt from the ledger (it happened: its output; it did not, and the worker
    that started the call is gone: retry; a frozen worker may finish a call it started once
    it is continued, even one whose body had not begun, so until it is gone the step stays
    in doubt). Only runs with no decision pending. Returns the decisions sent."""
    store = runtime.store
    sent = 0
    for run_id in run_ids:
        record = await runtime.run_io(store.get_run, run_id)
        if record.status != "suspended" or await runtime.run_io(store.pending_requests,
                                                                run_id, 0):
            continue
        run = runtime.get_run(run_id)
        for step_id, why in sorted(run.waiting().items()):
            try:
                if why == "waiting_confirmation":
                    await runtime.decide(run_id, step_id, "approve", note="at the desk",
                                         timeout=0.5)
                else:
                    key = run.state.steps[step_id].idempotency_key
                    done = [x for x in ledger.read() if x["what"] == "effect"
                            and x["key"] == key]
                    if done:
                        await runtime.decide(run_id, step_id, "resolve",
                                             output=done[0]["out"], timeout=0.5)
                    elif not pid_alive(starter(store.load_events(run_id), step_id)):
                        # the process that started the call is gone: nobody can finish it,
                        # it did not happen: call it again
                        await runtime.decide(run_id, step_id, "resolve", retry=True,
                                             timeout=0.5)
                    else:  # a frozen worker may yet finish it: the outcome is not known
                        continue
                sent += 1
            except ChainlabError:  # it moved on meanwhile: look again next pass
                pass
    return sent


def starter(events: list[Any], step_id: str) -> int:
    """The pid of the worker that started the step's last attempt (its ``step_started``'s
    epoch, named by that epoch's ``run_started`` / ``run_resumed``)."""
    epoch = [ev.epoch for ev in events if str(ev.kind) == "step_started"
             and ev.step_id == step_id][-1]
    return int(next(ev.payload["worker"]["pid"] for ev in events if ev.epoch == epoch
                    and str(ev.kind) in ("run_started", "run_resumed")))


def test_a_fleet_drains_a_backlog_while_workers_die_and_freeze(fleet: Fleet,
                                                               store_url: str) -> None:
    fleet.delay = 0.12
    store = open_pg(store_url)
    store.set_queue_limit("orders", 3)
    rng = random.Random(SEED)

    async def main() -> dict[str, Any]:
        async with Runtime(toolbox, store) as runtime:
            run_ids = [await runtime.enqueue(ORDER, {"n": i, "customer": f"c{i % 6}"},
                                             queue="orders") for i in range(RUNS)]
            for name in ("w1", "w2", "w3"):
                fleet.start(name)
            faults = {"kill": 0, "stop": 0, "decisions": 0}
            frozen: list[tuple[float, Any]] = []
            next_fault = time.monotonic() + 1.5
            deadline = time.monotonic() + 240
            while unfinished(store, run_ids):
                assert time.monotonic() < deadline, "the fleet did not drain the backlog"
                now = time.monotonic()
                for at, w in [f for f in frozen if f[0] <= now]:
                    w.cont()  # a zombie: it was fenced meanwhile
                    frozen.remove((at, w))
                if now >= next_fault and faults["kill"] + faults["stop"] < 10:
                    candidates = [w for w in fleet.live() if not w.stopped]
                    if len(candidates) > 1:
                        victim = rng.choice(candidates)
                        if rng.random() < 0.7:
                            victim.kill()
                            fleet.start(victim.name)  # the same name, at once
                            faults["kill"] += 1
                        else:
                            victim.stop()
                            frozen.append((now + fleet.lapse + 1.0, victim))
                            faults["stop"] += 1
                    next_fault = now + rng.uniform(0.6, 1.4)
                faults["decisions"] += await operate(runtime, run_ids, fleet.ledger)
                await anyio.sleep(0.1)
            for _, w in frozen:
                w.cont()
            return {"run_ids": run_ids, **faults}

    seen = anyio.run(main)
    run_ids = seen.pop("run_ids")
    for w in fleet.live():
        fleet.registered(w, store)  # (a worker still starting up has no SIGTERM handler)
        w.term()  # drain: nothing is left to drive, so each exits at once
    for w in fleet.workers:
        assert w.proc.wait(60) in (0, -9), w.output()
    logs = {r: store.load_events(r) for r in run_ids}
    statuses = {store.get_run(r).status for r in run_ids}
    keys = {r: store.get_run(r).concurrency_key for r in run_ids}
    limits = check_fleet_log(logs, keys, queue_limit=3, per_worker=2)
    calls = check_ledger(fleet.ledger.read(), logs)
    in_doubt = sum(1 for events in logs.values() for ev in events
                   if str(ev.kind) == "step_in_doubt")
    takeovers = sum(1 for events in logs.values() for ev in events
                    if str(ev.kind) == "run_resumed" and ev.payload.get("reason") == "recovery")
    print(f"\nfleet: {RUNS} runs, {seen['kill']} SIGKILLs, {seen['stop']} SIGSTOPs, "
          f"{takeovers} claims of a started run, {in_doubt} in_doubt, "
          f"{seen['decisions']} decisions, {calls['charges']} charges; most at once: {limits}")
    assert statuses == {"succeeded"}
    assert calls["charges"] == RUNS  # each exactly once
    assert seen["kill"] + seen["stop"] >= 6
    assert not store.list_workers()  # every worker left the registry
    assert store.queue_depths()[0].queued == 0
    store.close()


def takeover_after(fault: str, fleet: Fleet, store: Any, n: int) -> float:
    """Seconds from ``fault`` (``kill`` or ``stop``) of the worker driving a run mid-charge
    to another worker's ``run_resumed``; the run then ends (its charge resolved from the
    ledger if it was in doubt) and a stopped worker, continued, wrote nothing more."""

    async def enqueue() -> str:
        async with Runtime(toolbox, store) as runtime:
            return await runtime.enqueue(ORDER, {"n": n, "customer": f"solo{n}"},
                                         queue="orders")

    async def settle() -> None:
        async with Runtime(toolbox, store) as runtime:
            while store.get_run(run_id).status != "succeeded":
                await operate(runtime, [run_id], fleet.ledger)
                await anyio.sleep(0.1)

    def resumed() -> list[Any]:
        return [ev for ev in store.load_events(run_id) if str(ev.kind) == "run_resumed"]

    run_id = anyio.run(enqueue)
    first = fleet.registered(fleet.start(f"first-{fault}", concurrency=1), store)
    wait_for(lambda: store.get_run(run_id).driver, 30, "the first claim")
    second = fleet.registered(fleet.start(f"second-{fault}", concurrency=1), store)
    wait_for(lambda: any(x["what"] == "begin" and x["tool"] == "charge" and x["run"] == run_id
                         for x in fleet.ledger.read()), 30, "the charge in flight")
    at = time.time()
    (first.kill if fault == "kill" else first.stop)()
    took = wait_for(resumed, 60, "the takeover")[0]
    assert took.payload["worker"]["name"] == second.name
    if fault == "stop":
        wait_for(lambda: store.get_run(run_id).status in ("suspended", "succeeded"), 60,
                 "the run to settle")
        events = store.load_events(run_id)
        first.cont()  # the zombie: its call in flight returns, it tries to write
        time.sleep(fleet.lapse)
        after = store.load_events(run_id)
        assert after[:len(events)] == events
        assert all(ev.epoch >= took.epoch for ev in after[len(events):])  # none of its own
        first.term()
        assert first.proc.wait(60) == 0, first.output()
    anyio.run(settle)
    second.term()
    assert second.proc.wait(60) == 0, second.output()
    return took.ts - at


def test_a_dead_workers_runs_move_on(fleet: Fleet, store_url: str) -> None:
    """SIGKILL (noticed at once on this host: its pid is gone) and SIGSTOP (noticed when its
    heartbeats lapse) of the worker driving a run mid-call: another worker takes the run
    over (the charge in flight is in doubt, never repeated; a person resolves it from the
    ledger) and it ends; the frozen one, continued, writes nothing more."""
    # long calls: the fault lands mid-call (the charge's window, 2 x delay, must outlast the
    # second worker's start-up under load; a run started faster by the claim slipped past
    # a 1 s delay at load 13: 2 of 5 runs failed)
    fleet.delay = 2.5
    store = open_pg(store_url)
    moved = {fault: takeover_after(fault, fleet, store, n)
             for n, fault in enumerate(("kill", "stop"), start=1)}
    print(f"\nseconds from the fault to the takeover: SIGKILL {moved['kill']:.2f}, "
          f"SIGSTOP {moved['stop']:.2f} (lapse {fleet.lapse:g} s)")
    logs = {r.run_id: store.load_events(r.run_id) for r in store.list_runs()}
    calls = check_ledger(fleet.ledger.read(), logs)
    assert calls["charges"] == 2  # each run's charge exactly once
    store.close()


def test_reusing_a_worker_name_never_strands_a_run(fleet: Fleet, store_url: str) -> None:
    """The failures of DBOS #804 and Procrastinate #1518 as tests: a worker restarted under
    the same name (a pod rescheduled, a rolling restart) gets a new identity; it neither
    steals the run its draining namesake still drives, nor leaves the runs of a dead
    namesake stuck: each run ends exactly once."""
    fleet.delay = 0.8
    store = open_pg(store_url)

    async def enqueue(n: int) -> str:
        async with Runtime(toolbox, store) as runtime:
            return await runtime.enqueue(ORDER, {"n": n, "customer": f"r{n}"}, queue="orders")

    # a rolling restart: the old w1 drains its run while the new w1 starts
    draining_run = anyio.run(enqueue, 3)
    old = fleet.registered(fleet.start("w1", concurrency=1), store)
    wait_for(lambda: store.get_run(draining_run).driver, 30, "old w1's claim")
    old.term()  # drain: its run goes on to its end
    new = fleet.registered(fleet.start("w1", concurrency=1), store)
    assert old.proc.wait(60) == 0, old.output()
    assert store.get_run(draining_run).status == "succeeded"
    events = store.load_events(draining_run)
    assert not [ev for ev in events if str(ev.kind) == "run_resumed"]  # never stolen
    assert {ev.payload["worker"]["pid"] for ev in events if ev.kind == "run_started"} == {
        old.pid}
    # a crash, then a restart under the same name at once: its run is not stuck
    crashed_run = anyio.run(enqueue, 4)
    wait_for(lambda: store.load_events(crashed_run), 30, "new w1 to start the run")
    new.kill()
    again = fleet.registered(fleet.start("w1", concurrency=1), store)
    wait_for(lambda: store.get_run(crashed_run).status in ("succeeded", "suspended"), 60,
             "the dead namesake's run to move on")

    async def settle() -> None:
        async with Runtime(toolbox, store) as runtime:
            while store.get_run(crashed_run).status != "succeeded":
                await operate(runtime, [crashed_run], fleet.ledger)
                await anyio.sleep(0.1)

    anyio.run(settle)
    takers = [ev.payload["worker"]["pid"] for ev in store.load_events(crashed_run)
              if str(ev.kind) in ("run_started", "run_resumed") and "worker" in ev.payload]
    assert takers[0] == new.pid and takers[-1] == again.pid
    again.term()
    assert again.proc.wait(60) == 0, again.output()
    assert [w.name for w in store.list_workers()] == []
    logs = {r.run_id: store.load_events(r.run_id) for r in store.list_runs()}
    assert check_ledger(fleet.ledger.read(), logs)["charges"] == 2
    store.close()
