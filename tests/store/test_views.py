"""The SQL views ``attempts`` and ``step_runs`` say exactly what the Python fold
(``RunState.from_events``) says, for runs with retries, timeouts, in-doubt steps and their
resolution, compensations (retried and failed), cancellation, sub-chains and crash
recovery (re-run, reconciled, interrupted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import CallContext, Chain, PermanentError, Reconciliation, Toolbox, TransientError
from chainlab.runtime import RunState, Runtime
from chainlab.runtime.faults import inject
from chainlab.store import SQLiteStore
from chainlab.testing import FlakyTool, ManualClock

pytestmark = pytest.mark.anyio

COLUMNS = ("step_id", "attempt", "kind", "epoch", "tool", "started_at", "ended_at", "status",
           "error_kind", "error", "idempotency_key", "retry_delay_s")


def toolbox() -> Toolbox:
    tb = Toolbox("views")
    FlakyTool(failures=2, result="ok").register(tb, "flaky")
    calls = {"slow": 0, "unsafe": 0, "undo": 0}

    @tb.tool
    async def slow() -> str:
        calls["slow"] += 1
        if calls["slow"] == 1:
            await anyio.sleep(5)
        return "late"

    @tb.tool(side_effects=True)
    async def unsafe(n: int) -> int:
        calls["unsafe"] += 1
        if calls["unsafe"] == 1:
            raise ValueError("connection reset after sending")
        return n

    @tb.tool(side_effects=True, idempotent=True, compensate=("undo", {"n": "{{ input.n }}"}))
    async def book(n: int) -> int:
        return n

    @tb.tool(side_effects=True, idempotent=True)
    async def undo(n: int) -> None:
        calls["undo"] += 1
        if n == 1 and calls["undo"] == 1:
            raise TransientError("busy")
        if n == 2:
            raise PermanentError("cannot undo 2")

    @tb.tool
    async def boom() -> None:
        raise PermanentError("declined")

    @tb.tool
    async def hang() -> None:
        await anyio.sleep(60)

    @tb.tool(side_effects=True, reconcile=lambda args, key: Reconciliation.took_effect(args["n"]))
    async def reconciled(n: int, ctx: CallContext) -> int:
        return n

    tb.add_chain(Chain.from_dict({"name": "inner", "steps": [
        {"id": "x", "tool": "book", "args": {"n": 7}, "rollback": "none"},
        {"id": "y", "tool": "flaky", "retry": {"max_attempts": 3, "delay_s": 1}}]}))
    return tb


CHAINS = {
    "retries": [{"id": "f", "tool": "flaky", "retry": {"max_attempts": 3, "delay_s": 2,
                                                       "backoff": "exponential"}}],
    "timeout": [{"id": "s", "tool": "slow", "timeout_s": 0.05, "retry": {"delay_s": 1}}],
    "in_doubt": [{"id": "u", "tool": "unsafe", "args": {"n": 4}},
                 {"id": "v", "tool": "book", "args": {"n": "{{ steps.u.output }}"}}],
    "saga": [{"id": "a", "tool": "book", "args": {"n": 1}},
             {"id": "b", "tool": "book", "args": {"n": 2}, "depends_on": ["a"]},
             {"id": "c", "tool": "boom", "depends_on": ["b"]}],
    "cancel": [{"id": "h", "tool": "hang"}, {"id": "after", "tool": "boom", "depends_on": ["h"]}],
    "subchain": [{"id": "sub", "tool": "chain:inner"}],
    "recovery": [{"id": "r1", "tool": "reconciled", "args": {"n": 1}},
                 {"id": "r2", "tool": "book", "args": {"n": 3}, "rollback": "none"},
                 {"id": "r3", "tool": "unsafe", "args": {"n": 5}}],
}


async def drive(runtime: Runtime, name: str) -> None:
    chain = Chain.from_dict({"name": name, "steps": CHAINS[name]})
    run = await runtime.start(chain, run_id=name)
    with anyio.fail_after(10):
        if name == "cancel":
            while run.steps["h"].status != "running":
                await anyio.sleep(0)
            await run.cancel()
        result = await run.wait()
        if name == "in_doubt":
            assert result.waiting == {"u": "in_doubt"}
            await run.resolve("u", retry=True)
            result = await run.wait()
    assert result.status != "running"


async def crashed_copy(store: Any, runtime: Runtime) -> None:
    """Run 'recovery' again as 'recovery-crashed', cut right after the three calls started,
    then resume it: r1 is reconciled, r2 re-run, r3 in doubt (resolved by failing it)."""
    events = store.load_events("recovery")
    cut = max(i for i, e in enumerate(events) if e.kind == "step_started") + 1
    record = store.get_run("recovery").with_(run_id="recovery-crashed", epoch=1)
    store.create_run(record)
    store.append("recovery-crashed", 1,
                 [e._replace(run_id="recovery-crashed") for e in events[:cut]])
    await store.flush("recovery-crashed", 1)
    run = await runtime.resume("recovery-crashed")
    with anyio.fail_after(10):
        result = await run.wait()
        assert result.waiting == {"r3": "in_doubt"}
        await run.resolve("r3", fail=True)
        await run.wait()


def fold(store: Any, run_id: str) -> RunState:
    return RunState.from_events(run_id, store.load_events(run_id))


@pytest.fixture(params=["sqlite", "postgres"])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """The same runs on both SQL stores, with each one's placeholder."""
    if request.param == "sqlite":
        store: Any = SQLiteStore(tmp_path / "views.db")
        mark = "?"
    else:
        pytest.importorskip("psycopg")
        from chainlab.store.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("pg_cluster").dsn())
        mark = "%s"
    yield store, mark
    store.close()


async def forked_and_faulted(runtime: Runtime) -> None:
    """A fork of 'in_doubt' (its u and v are step_reused) and a fault event on a
    step after its last status change: neither may leave a step without a status."""
    fork = await runtime.fork("in_doubt")
    with anyio.fail_after(10):
        await fork.wait()
    chain = Chain.from_dict({"name": "faulted", "steps": [{"id": "f", "tool": "flaky",
                                                           "retry": {"max_attempts": 3}}]})
    run = await runtime.start(chain, run_id="faulted")
    await inject(run, "raise", "f", error_kind="transient")
    with anyio.fail_after(10):
        await run.wait()


async def test_views_agree_with_the_fold(sql_store: tuple[Any, str]) -> None:
    store, mark = sql_store
    runtime = Runtime(toolbox(), store, clock=ManualClock())
    for name in CHAINS:
        await drive(runtime, name)
    await crashed_copy(store, runtime)
    await forked_and_faulted(runtime)
    await runtime.aclose()
    statuses: set[str] = set()
    kinds_seen = {e.kind for r in store.list_runs() for e in store.load_events(r.run_id)}
    assert {"step_reused", "fault_injected"} <= kinds_seen
    for run in store.list_runs():
        state = fold(store, run.run_id)
        view = store.query(f"SELECT {', '.join(COLUMNS)} FROM attempts WHERE run_id = {mark}",
                           (run.run_id,))
        expected = [tuple(getattr(a, c) for c in COLUMNS) for a in state.attempts]
        assert sorted(view, key=repr) == sorted(expected, key=repr), run.run_id
        steps = dict(store.query(f"SELECT step_id, status FROM step_runs WHERE run_id = {mark}",
                                 (run.run_id,)))
        assert steps == {s: str(st.status) for s, st in state.steps.items()
                         if st.status != "pending"}, run.run_id
        statuses.update(row[7] for row in view)
    assert statuses == {"succeeded", "failed", "timed_out", "cancelled", "interrupted"}
    kinds = {row[0] for row in store.query("SELECT kind FROM attempts")}
    assert kinds == {"call", "compensation"}
