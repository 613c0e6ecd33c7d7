"""Budgets (issue 31): before a step is released, spent + expected is compared with
``options.budget``; a limit that would be crossed suspends the run with a budget_exceeded
decision for a person (raise it and continue, or stop); a running step is never stopped;
a resumed run and a fork count nothing twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import CallContext, Chain, Toolbox
from chainlab.errors import DecisionError
from chainlab.events import RunState
from chainlab.runtime import Runtime
from chainlab.runtime.coordination.inbox import waiting_decisions
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing import ManualClock

pytestmark = pytest.mark.anyio


def paid_tools(clock: ManualClock | None = None) -> Toolbox:
    tools = Toolbox("paid")

    @tools.tool
    def ask(n: int, ctx: CallContext) -> int:
        ctx.report_usage(input_tokens=80, output_tokens=20, cost=0.01)
        if clock is not None:
            clock.advance(5.0)  # each call takes 5 s of (manual) time
        return n

    return tools


def chain(budget: dict[str, Any] | None, steps: int = 3) -> Chain:
    return Chain.from_dict({"name": "paid", "options": {"budget": budget} if budget else {},
                            "steps": [{"id": f"s{i}", "tool": "ask", "args": {"n": i},
                                       **({"depends_on": [f"s{i - 1}"]} if i > 1 else {})}
                                      for i in range(1, steps + 1)]})


async def test_spent_budget_suspends_before_the_next_step_and_a_raise_continues() -> None:
    store = MemoryStore()
    async with Runtime(paid_tools(), store, clock=ManualClock()) as runtime:
        run = await runtime.start(chain({"max_cost": 0.015}))
        result = await run.wait()
        # s1 ran (0.01), s2 was expected to cost nothing (no history) and ran: it crossed
        # the budget while running and was not interrupted; s3 waits for a person
        assert result.status == "suspended"
        assert {k: str(v.status) for k, v in run.steps.items()} == {
            "s1": "succeeded", "s2": "succeeded", "s3": "waiting_confirmation"}
        st = run.steps["s3"]
        assert st.reason == "budget_exceeded"
        assert st.preview == ("budget exceeded: cost: 0.02 spent + 0 expected > "
                              "max_cost=0.015. Approve with a raised budget to continue, "
                              "or reject to stop.")
        [inbox] = waiting_decisions(store)
        assert (inbox.step_id, inbox.kind) == ("s3", "confirm")
        assert "budget exceeded" in str(inbox.preview)
        with pytest.raises(DecisionError, match="is not a budget"):
            await run.approve("s3", budget={"max_cost": -1})
        await run.approve("s3", budget={"max_cost": 1.0})
        result = await run.wait()
    assert result.status == "succeeded"
    assert run.state.budget == {"max_cost": 1.0}
    assert run.state.usage["cost"] == 0.03


async def test_history_makes_the_estimate_and_stop_means_reject() -> None:
    store = MemoryStore()
    async with Runtime(paid_tools(), store, clock=ManualClock()) as runtime:
        first = await runtime.start(chain(None))
        assert (await first.wait()).status == "succeeded"
        # now each step is expected to cost 0.01: s3 would cross 0.025 before it starts
        run = await runtime.start(chain({"max_cost": 0.025}))
        assert (await run.wait()).status == "suspended"
        assert run.waiting() == {"s3": "waiting_confirmation"}
        assert run.steps["s3"].preview.startswith(
            "budget exceeded: cost: 0.02 spent + 0.01 expected > max_cost=0.025")
        started = next(e for e in run.event_list() if e.kind == "run_started")
        assert started.payload["budget_estimates"]["s3"]["cost"] == 0.01
        await run.reject("s3", "over budget: stop")
        result = await run.wait()
    assert result.status == "failed" and run.steps["s3"].status == "rejected"
    assert run.state.usage["cost"] == 0.02


async def test_tokens_and_time_limits() -> None:
    async with Runtime(paid_tools(), MemoryStore(), clock=ManualClock()) as runtime:
        run = await runtime.start(chain({"max_tokens": 150}))
        await run.wait()
        assert run.waiting() == {"s3": "waiting_confirmation"}
        assert "tokens: 200 spent + 0 expected > max_tokens=150" in run.steps["s3"].preview
        await run.approve("s3")  # no raise: this step may go, the next would ask again
        assert (await run.wait()).status == "succeeded"
        assert run.state.budget is None
    clock = ManualClock()
    async with Runtime(paid_tools(clock), MemoryStore(), clock=clock) as runtime:
        run = await runtime.start(chain({"max_duration_s": 7}))
        await run.wait()
        assert run.waiting() == {"s3": "waiting_confirmation"}
        assert "time: 10 s elapsed + 0 s expected > max_duration_s=7" in \
            run.steps["s3"].preview


async def test_a_budget_suspension_survives_a_resume_without_double_counting(
        tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with Runtime(paid_tools(), SQLiteStore(db), clock=ManualClock()) as runtime:
        run = await runtime.start(chain({"max_cost": 0.015}))
        assert (await run.wait()).status == "suspended"
        run_id = run.run_id
    store = SQLiteStore(db)  # another process, days later
    async with Runtime(paid_tools(), store, clock=ManualClock()) as runtime:
        run = await runtime.resume(run_id)
        assert run.waiting() == {"s3": "waiting_confirmation"}
        assert run.state.usage["cost"] == 0.02
        await run.approve("s3", budget={"max_cost": 0.05})
        assert (await run.wait()).status == "succeeded"
    state = RunState.from_events(run_id, store.load_events(run_id))
    assert state.usage["cost"] == 0.03 and state.budget == {"max_cost": 0.05}
    assert [a.step_id for a in state.attempts] == ["s1", "s2", "s3"]


async def test_a_forks_reused_steps_do_not_spend_its_budget() -> None:
    store = MemoryStore()
    async with Runtime(paid_tools(), store, clock=ManualClock()) as runtime:
        run = await runtime.start(chain(None))
        await run.wait()
        # reused s1 and s2 cost the fork nothing: only s3 runs, within 0.015
        fork = await runtime.fork(run.run_id, rerun="s3", chain=chain({"max_cost": 0.015}))
        result = await fork.wait()
    assert result.status == "succeeded"
    assert fork.state.usage["cost"] == 0.01


# ---------------------------------------------------------------- reservations (issue 36)
def concurrent_tools(gate: anyio.Event, started: list[str]) -> Toolbox:
    tools = Toolbox("concurrent")

    @tools.tool
    async def work(n: int, ctx: CallContext) -> int:
        started.append(ctx.step_id)
        await gate.wait()
        ctx.report_usage(cost=1.0)
        return n

    return tools


def wide(budget: dict[str, Any] | None, n: int = 8) -> Chain:
    return Chain.from_dict({"name": "wide", "options": {
        "max_concurrency": n, **({"budget": budget} if budget else {})},
        "steps": [{"id": f"w{i}", "tool": "work", "args": {"n": i}} for i in range(n)]})


async def _history(store: Any) -> None:
    """One earlier run of the same chain: each step is now known to cost 1.0."""
    gate = anyio.Event()
    gate.set()
    async with Runtime(concurrent_tools(gate, []), store, clock=ManualClock()) as runtime:
        run = await runtime.start(wide(None))
        assert (await run.wait()).status == "succeeded"
        assert run.state.usage["cost"] == 8.0


async def test_concurrent_steps_reserve_their_expected_cost() -> None:
    """Eight steps of known cost 1.0 released at once on a budget of 3.0: three run, the
    others wait for a person (8 of 8 ran before: each checked 0 spent + 1 expected)."""
    store = MemoryStore()
    await _history(store)
    gate, started = anyio.Event(), []
    async with Runtime(concurrent_tools(gate, started), store, clock=ManualClock()) as runtime:
        run = await runtime.start(wide({"max_cost": 3.0}))
        await anyio.wait_all_tasks_blocked()
        assert started == ["w0", "w1", "w2"]
        assert run.waiting() == {f"w{i}": "waiting_confirmation" for i in range(3, 8)}
        st = run.steps["w3"]
        assert st.reason == "budget_exceeded"
        assert st.preview.startswith("budget exceeded: cost: 0 spent + 3 reserved by running "
                                     "steps + 1 expected > max_cost=3.")
        gate.set()
        assert (await run.wait()).status == "suspended"
        # the reservations ended with their attempts; their real usage is spent now
        assert run.state.usage["cost"] == 3.0 and run.state.open_attempts() == []
        await run.approve("w3", budget={"max_cost": 8.0})
        for step_id in [s for s, status in run.waiting().items()]:
            await run.approve(step_id)
        result = await run.wait()
    assert result.status == "succeeded" and run.state.usage["cost"] == 8.0
    assert sorted(started) == [f"w{i}" for i in range(8)]


async def test_for_each_instances_reserve_their_steps_expected_cost() -> None:
    """A for_each step over eight items whose tool is known to cost 1.0 a call, on a budget
    of 3.0: each instance is expected to cost what one call of its step costs, so three run
    and the others wait for a person (without it each instance expected 0, and all 8 ran)."""
    store = MemoryStore()
    await _history(store)  # the tool's calls cost 1.0 each
    gate, started = anyio.Event(), []
    fan = Chain.from_dict({"name": "fan", "options": {"max_concurrency": 8,
                                                      "budget": {"max_cost": 3.0}},
                           "steps": [{"id": "w", "tool": "work", "for_each": "{{ context.ns }}",
                                      "args": {"n": "{{ item }}"}}]})
    async with Runtime(concurrent_tools(gate, started), store, clock=ManualClock()) as runtime:
        run = await runtime.start(fan, {"ns": list(range(8))})
        await anyio.wait_all_tasks_blocked()
        assert started == ["w[0]", "w[1]", "w[2]"]
        assert run.waiting() == {f"w[{i}]": "waiting_confirmation" for i in range(3, 8)}
        assert run.steps["w[3]"].reason == "budget_exceeded"
        gate.set()
        await run.approve("w[3]", budget={"max_cost": 8.0})
        await run.approve_all("w")
        result = await run.wait()
    assert result.status == "succeeded" and result.outputs["w"] == list(range(8))
    assert run.state.usage["cost"] == 8.0


async def test_reservations_after_a_takeover(tmp_path: Path) -> None:
    """A driver taken over with three calls under way: the new one's recovery ends those
    attempts (their reservations with them) and runs them again, reserving them once."""
    db = tmp_path / "runs.db"
    await _history(SQLiteStore(db))
    gate_a, started_a = anyio.Event(), []
    gate_b, started_b = anyio.Event(), []
    async with Runtime(concurrent_tools(gate_a, started_a), SQLiteStore(db),
                       clock=ManualClock()) as a:
        run_a = await a.start(wide({"max_cost": 3.0}))
        await anyio.wait_all_tasks_blocked()
        assert started_a == ["w0", "w1", "w2"]
        await run_a.runtime.store.flush(run_a.run_id, 1)
        async with Runtime(concurrent_tools(gate_b, started_b), SQLiteStore(db),
                           clock=ManualClock()) as b:
            run_b = await b.resume(run_a.run_id, force=True)  # A's calls never report
            await anyio.wait_all_tasks_blocked()
            assert started_b == ["w0", "w1", "w2"]  # effect-free: run again
            assert [r.attempt for r in run_b.state.open_attempts()] == [2, 2, 2]
            assert run_b.waiting() == {f"w{i}": "waiting_confirmation" for i in range(3, 8)}
            gate_b.set()
            assert (await run_b.wait()).status == "suspended"
            assert run_b.state.usage["cost"] == 3.0
            await run_b.approve("w3", budget={"max_cost": 8.0})
            for step_id in list(run_b.waiting()):
                await run_b.approve(step_id)
            assert (await run_b.wait()).status == "succeeded"
            assert run_b.state.usage["cost"] == 8.0
        gate_a.set()
