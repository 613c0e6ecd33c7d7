"""Recovery without re-execution (DESIGN §7), in-process and exhaustive: the run is
"crashed" after EVERY event of an uninterrupted run's log (and, when a call was in flight,
both with and without its effect in the world), then resumed by a new runtime and driven to
the end by an operator that approves and resolves from the ledger. Plus the single paths of
``recover``: reconcile answers, resolve variants, a back-off in progress, a run that was
stopping, and resolving right after resume."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import CallContext, Chain, PermanentError, Reconciliation, Toolbox, TransientError
from chainlab.runtime import RunState, Runtime
from chainlab.store import Event, MemoryStore, RunRecord
from tests.durability.chainlib import (
    CRASH_COMPENSABLE_STEPS,
    CRASH_UNSAFE_STEPS,
    FANOUT_COMPENSABLE_STEPS,
    FANOUT_UNSAFE_STEPS,
    SEED,
    Ledger,
    crash_chain,
    fanout_chain,
    make_toolbox,
    settle,
)
from tests.durability.crashsim import crashed_store, final_snapshot, open_calls, world_at
from tests.durability.harness import Snapshot, check_finished, check_recovery_of

pytestmark = pytest.mark.anyio


async def uninterrupted(toolbox: Toolbox, chain: Chain, ledger: Ledger,
                        **kw: Any) -> tuple[list[Event], RunRecord, dict[str, Any]]:
    store = MemoryStore()
    runtime = Runtime(toolbox, store)
    run = await runtime.start(chain, {"seed": SEED}, run_id="run", **kw)
    with anyio.fail_after(10):
        result = await settle(run, ledger)
    await runtime.aclose()
    return store.load_events("run"), store.get_run("run"), result.outputs


async def resume_and_settle(store: Any, toolbox: Toolbox, ledger: Ledger) -> None:
    runtime = Runtime(toolbox, store)
    run = await runtime.resume("run")
    with anyio.fail_after(10):
        await settle(run, ledger)
    await runtime.aclose()


async def every_crash(kind: str, toolbox: Toolbox, events: list[Event], record: RunRecord,
                      outputs: dict[str, Any], world: Ledger, tmp_path: Path,
                      ) -> AsyncIterator[tuple[list[Event], Snapshot, Snapshot]]:
    """For each cut of ``events`` (and, with a call in flight, with and without its effect
    in the world): a store holding the prefix, resumed and settled by a new runtime with
    ``toolbox`` (its ledger pointed at that cut's world). Yields ``(prefix, the snapshot at
    the crash, the final snapshot)``. From 1: a run is created with its first event in one
    transaction (issue 36), so a crash leaves no run at all or one with its head (a log of 0
    events is refused: tests/runtime/test_creation.py)."""
    for cut in range(1, len(events) + 1):
        prefix = events[:cut]
        for in_flight_done in ([False, True] if open_calls(prefix) else [False]):
            ledger = world_at(prefix, outputs, in_flight_done,
                              tmp_path / f"ledger-{cut}-{in_flight_done}.jsonl")
            at_crash = Snapshot(prefix, ledger.read(), None)
            store = await crashed_store(kind, record, prefix)
            world.path = ledger.path
            await resume_and_settle(store, toolbox, world)
            final = final_snapshot(store, ledger)
            store.close()
            yield prefix, at_crash, final


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "rolls-back"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_crash_after_every_event(kind: str, fail: bool, tmp_path: Path) -> None:
    # one toolbox for every cut, its ledger pointed at each cut's world in turn (building
    # the tools' schemas per cut would cost more than the crashes)
    world = Ledger(tmp_path / "base.jsonl", fsync=False)
    toolbox = make_toolbox(world)
    events, record, outputs = await uninterrupted(toolbox, crash_chain(fail), world)
    expected = RunState.from_events("run", events)
    assert expected.status == ("rolled_back" if fail else "succeeded")
    steps = {s: str(st.status) for s, st in expected.steps.items()}
    seen = Counter[str]()
    async for _, at_crash, final in every_crash(kind, toolbox, events, record, outputs, world,
                                                tmp_path):
        check_finished(final, outputs, CRASH_UNSAFE_STEPS, status=str(expected.status),
                       steps=steps, compensable=CRASH_COMPENSABLE_STEPS)
        seen.update(check_recovery_of(at_crash, final))
    want = {"charge in doubt (after its effect)", "charge in doubt (before its effect)",
            "transfer in doubt (after its effect)", "transfer in doubt (before its effect)",
            "send reconciled: took effect", "send reconciled: no effect",
            "compute re-run", "upsert re-run", "check re-run"}
    if fail:
        want |= {f"{tool} compensation re-run ({when} its effect)"
                 for tool in ("refund", "unset") for when in ("before", "after")}
    assert {k for k in seen if not k.startswith("no open")} == want


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "rolls-back"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_graph_that_grows_recovers_after_every_event(kind: str, fail: bool,
                                                            tmp_path: Path) -> None:
    """The same exhaustive crash, on for_each steps (DESIGN §17): the instances are rebuilt
    from the log's steps_added, never grown twice; every instance's interrupted call ends as
    its tool's contract says; no recorded call runs again; the rollback undoes each instance
    once, in reverse completion order."""
    world = Ledger(tmp_path / "base.jsonl", fsync=False)
    toolbox = make_toolbox(world)
    events, record, outputs = await uninterrupted(toolbox, fanout_chain(fail), world)
    expected = RunState.from_events("run", events)
    assert expected.status == ("rolled_back" if fail else "succeeded")
    assert [e.step_id for e in events if e.kind == "steps_added"] == ["pay", "up", "note"]
    steps = {s: str(st.status) for s, st in expected.steps.items()}
    seen = Counter[str]()
    async for _, at_crash, final in every_crash(kind, toolbox, events, record, outputs, world,
                                                tmp_path):
        check_finished(final, outputs, FANOUT_UNSAFE_STEPS, status=str(expected.status),
                       steps=steps, compensable=FANOUT_COMPENSABLE_STEPS)
        grown = [e.step_id for e in final.events or () if e.kind == "steps_added"]
        assert sorted(grown) == ["note", "pay", "up"], grown  # each grew exactly once
        seen.update(check_recovery_of(at_crash, final))
    assert {"charge in doubt (after its effect)", "charge in doubt (before its effect)",
            "send reconciled: took effect", "send reconciled: no effect",
            "upsert re-run"} <= set(seen)


# ---------------------------------------------------------------- a run that was stopping
def saga_toolbox(ledger: Ledger) -> Toolbox:
    tb = Toolbox("saga")

    def write(ctx: CallContext, tool: str, effect: bool, out: Any = None) -> None:
        ledger.write(step=ctx.step_id, tool=tool, key=ctx.idempotency_key, effect=effect,
                     epoch=ctx.epoch, attempt=ctx.attempt, pid=0, out=out, kind=ctx.kind)

    @tb.tool(side_effects=True, idempotent=True,
             compensate=("unbook", {"slot": "{{ input.slot }}"}))
    def book(slot: int, ctx: CallContext) -> int:
        write(ctx, "book", True, slot)
        return slot

    @tb.tool(side_effects=True, idempotent=True)
    def unbook(slot: int, ctx: CallContext) -> None:
        write(ctx, "unbook", True)

    @tb.tool
    async def noop(ctx: CallContext) -> str:
        write(ctx, "noop", False)
        return "ok"

    @tb.tool
    async def boom(ctx: CallContext) -> None:
        write(ctx, "boom", False)
        raise PermanentError("card declined")

    return tb


SAGA = Chain.from_dict({"name": "saga", "options": {"mode": "sequential"}, "steps": [
    {"id": "a", "tool": "book", "args": {"slot": 1}},
    {"id": "b", "tool": "book", "args": {"slot": 2}, "depends_on": ["a"]},
    {"id": "c", "tool": "noop"},
    {"id": "d", "tool": "boom", "depends_on": ["b"]},
    {"id": "e", "tool": "book", "args": {"slot": 3}, "depends_on": ["c"]},
]})


async def test_a_crash_during_fail_fast_or_rollback_does_not_change_the_outcome(
        tmp_path: Path) -> None:
    base_ledger = Ledger(tmp_path / "base.jsonl", fsync=False)
    events, record, outputs = await uninterrupted(saga_toolbox(base_ledger), SAGA, base_ledger)
    expected = RunState.from_events("run", events)
    assert expected.status == "rolled_back"
    want = {s: str(st.status) for s, st in expected.steps.items()}
    assert want == {"a": "compensated", "b": "compensated", "c": "succeeded", "d": "failed",
                    "e": "cancelled"}
    # from 1: a run is created with its first event in one transaction (issue 36), so a
    # crash leaves no run at all or one with its head (a log of 0 events is refused:
    # tests/runtime/test_creation.py)
    for cut in range(1, len(events) + 1):
        prefix = events[:cut]
        for in_flight_done in ([False, True] if open_calls(prefix) else [False]):
            ledger = world_at(prefix, outputs, in_flight_done,
                              tmp_path / f"l-{cut}-{in_flight_done}")
            store = await crashed_store("memory", record, prefix)
            await resume_and_settle(store, saga_toolbox(ledger), ledger)
            final = RunState.from_events("run", store.load_events("run"))
            assert final.status == "rolled_back", (cut, in_flight_done)
            assert {s: str(st.status) for s, st in final.steps.items()} == want, cut
            assert not [e for e in ledger.read() if e["step"] == "e"], "e ran after d failed"
            done_at_cut = {e.step_id for e in prefix if e.kind == "compensation_succeeded"}
            again = {e.step_id for e in store.load_events("run", cut)
                     if e.kind == "compensation_started"}
            assert not done_at_cut & again, f"compensated twice after cut {cut}"


async def test_a_crash_after_cancel_does_not_run_more(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", fsync=False)
    tb = saga_toolbox(ledger)
    gate = anyio.Event()

    @tb.tool
    async def wait_gate() -> str:
        await gate.wait()
        return "never"

    chain = Chain.from_dict({"name": "cancel", "options": {"compensate_on_failure": False},
                             "steps": [
        {"id": "a", "tool": "wait_gate"},
        {"id": "b", "tool": "noop", "depends_on": ["a"]},
        {"id": "c", "tool": "noop"},
        {"id": "d", "tool": "noop", "depends_on": ["c", "a"]},
    ]})
    store = MemoryStore()
    runtime = Runtime(tb, store)
    run = await runtime.start(chain, run_id="run")
    while run.steps["c"].status != "succeeded":
        await anyio.sleep(0)
    await run.cancel()
    with anyio.fail_after(5):
        await run.wait()
    await runtime.aclose()
    events = store.load_events("run")
    want = {s: str(st.status) for s, st in RunState.from_events("run", events).steps.items()}
    assert want == {"a": "cancelled", "b": "cancelled", "c": "succeeded", "d": "cancelled"}
    first_cancel = next(i for i, e in enumerate(events) if e.kind == "step_cancelled")
    for cut in range(first_cancel + 1, len(events)):
        crashed = await crashed_store("memory", store.get_run("run"), events[:cut])
        await resume_and_settle(crashed, tb, ledger)
        final = RunState.from_events("run", crashed.load_events("run"))
        assert final.status == "cancelled", cut
        assert {s: str(st.status) for s, st in final.steps.items()} == want, cut


# ---------------------------------------------------------------- single recovery paths
class World:
    """A toolbox with one unsafe tool ``pay`` (reconcile answer configurable) and an
    effect-free ``after``; counts calls and keeps the keys it was called with."""

    def __init__(self, reconcile: Any = None, fail_first: bool = False):
        self.calls: list[tuple[str, int, str]] = []
        self.fail_first = fail_first
        self.toolbox = tb = Toolbox("world")
        world = self

        @tb.tool(side_effects=True, reconcile=reconcile)
        async def pay(amount: int, ctx: CallContext) -> dict[str, int]:
            world.calls.append(("pay", ctx.attempt, ctx.idempotency_key))
            if world.fail_first and ctx.attempt == 1:
                raise TransientError("rate limited", before_effect=True)
            return {"paid": amount}

        @tb.tool
        async def after(paid: int) -> int:
            world.calls.append(("after", 0, ""))
            return paid + 1

    chain = Chain.from_dict({"name": "pay", "steps": [
        {"id": "p", "tool": "pay", "args": {"amount": 5},
         "retry": {"max_attempts": 3, "delay_s": 30}},
        {"id": "q", "tool": "after", "args": {"paid": "{{ steps.p.output.paid }}"}},
    ]})


async def crashed_at(kind: str, world: World, stop: str) -> Any:
    """A store whose run stopped right after the first event of kind ``stop`` of step p."""
    store = MemoryStore()
    runtime = Runtime(world.toolbox, store)
    run = await runtime.start(World.chain, run_id="run")
    with anyio.fail_after(5):
        while not any(e.kind == stop for e in store.load_events("run")):
            await anyio.sleep(0)
    await runtime.aclose()
    events = store.load_events("run")
    cut = next(i for i, e in enumerate(events) if e.kind == stop) + 1
    world.calls.clear()
    return await crashed_store(kind, store.get_run("run"), events[:cut]), run


@pytest.mark.parametrize("answer, outcome", [
    (Reconciliation.took_effect({"paid": 5}), "succeeded"),
    (Reconciliation.no_effect(), "rerun"),
    (Reconciliation.took_effect({"paid": "five"}), "in_doubt"),  # bad output: a person looks
    (None, "in_doubt"),
    (RuntimeError("ledger down"), "in_doubt"),
], ids=["took-effect", "no-effect", "bad-output", "unknown", "reconcile-raises"])
async def test_reconcile_answers(answer: Any, outcome: str) -> None:
    keys = []

    def reconcile(args: dict[str, Any], key: str) -> Any:
        keys.append((args, key))
        if isinstance(answer, Exception):
            raise answer
        return answer

    world = World(reconcile)
    store, _ = await crashed_at("memory", world, "step_started")
    started = store.load_events("run")[-1]
    runtime = Runtime(world.toolbox, store)
    run = await runtime.resume("run")
    with anyio.fail_after(5):
        result = await run.wait()
    await runtime.aclose()
    assert keys == [({"amount": 5}, started.payload["idempotency_key"])]
    if outcome == "succeeded":
        assert result.ok and result.outputs == {"p": {"paid": 5}, "q": 6}
        assert [c[0] for c in world.calls] == ["after"]  # pay was not called again
    elif outcome == "rerun":
        assert result.ok
        assert world.calls[0] == ("pay", 2, started.payload["idempotency_key"])
    else:
        assert result.waiting == {"p": "in_doubt"} and world.calls == []
        assert run.steps["p"].reason == "interrupted"
    assert run.state.attempts[0].status == "interrupted"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_resolve_retry_calls_again_with_the_same_key(kind: str) -> None:
    world = World()
    store, _ = await crashed_at(kind, world, "step_started")
    key = store.load_events("run")[-1].payload["idempotency_key"]
    runtime = Runtime(world.toolbox, store)
    run = await runtime.resume("run")
    with anyio.fail_after(5):
        assert (await run.wait()).waiting == {"p": "in_doubt"}
        await run.resolve("p", retry=True, note="checked: never arrived")
        result = await run.wait()
    await runtime.aclose()
    assert result.ok and world.calls == [("pay", 2, key), ("after", 0, "")]
    assert [(a.attempt, a.status, a.idempotency_key) for a in run.state.attempts
            if a.step_id == "p"] == [(1, "interrupted", key), (2, "succeeded", key)]
    if kind == "sqlite":
        assert store.query("SELECT attempt, status, idempotency_key FROM attempts "
                           "WHERE step_id = 'p' ORDER BY attempt") == [
            (1, "interrupted", key), (2, "succeeded", key)]


async def test_resolve_fail_blocks_downstream() -> None:
    world = World()
    store, _ = await crashed_at("memory", world, "step_started")
    runtime = Runtime(world.toolbox, store)
    run = await runtime.resume("run")
    with anyio.fail_after(5):
        await run.wait()
        await run.resolve("p", fail=True, note="the bank says no")
        result = await run.wait()
    await runtime.aclose()
    assert result.status == "failed" and world.calls == []
    assert (run.steps["p"].status, run.steps["q"].status) == ("failed", "skipped")
    assert "the bank says no" in (run.steps["p"].error or "")


async def test_a_back_off_in_progress_continues_after_resume() -> None:
    world = World(fail_first=True)
    store, _ = await crashed_at("memory", world, "step_retry_scheduled")
    key = next(e for e in store.load_events("run") if e.kind == "step_started"
               ).payload["idempotency_key"]
    clock = _FastClock()  # the recovered back-off sleeps on the runtime's clock
    runtime = Runtime(world.toolbox, store, clock=clock)
    run = await runtime.resume("run")
    assert run.steps["p"].status in ("retry_wait", "ready", "running", "succeeded")
    with anyio.fail_after(5):
        result = await run.wait()
    await runtime.aclose()
    assert result.ok and world.calls[0] == ("pay", 2, key)
    assert clock.slept and 0 < clock.slept[0] <= 30


class _FastClock:
    """System time, but sleeps return at once (and are recorded)."""

    def __init__(self) -> None:
        import time

        self.now = time.time
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await anyio.sleep(0)


async def test_resolve_with_output_releases_dependants() -> None:
    """A resumed run whose workers never started: resolving the in-doubt step releases its
    dependant, and something must wake a worker for it (was a kernel bug: hang)."""
    world = World()
    store, _ = await crashed_at("memory", world, "step_started")
    runtime = Runtime(world.toolbox, store)
    run = await runtime.resume("run")
    try:
        with anyio.fail_after(2):
            await run.wait()
            await run.resolve("p", output={"paid": 5}, note="the bank confirmed it")
            result = await run.wait()
        assert result.ok and result.outputs["q"] == 6
    finally:
        await runtime.aclose()


async def test_resolve_right_after_resume() -> None:
    world = World()
    store, _ = await crashed_at("memory", world, "step_started")
    runtime = Runtime(world.toolbox, store)  # a first resume marks p in_doubt
    run = await runtime.resume("run")
    with anyio.fail_after(2):
        await run.wait()
    await runtime.aclose()
    runtime = Runtime(world.toolbox, store)
    run = await runtime.resume("run")  # a new process: resolve at once
    try:
        with anyio.fail_after(2):
            await run.resolve("p", output={"paid": 5})
            result = await run.wait()
        assert result.ok
    finally:
        await runtime.aclose()
