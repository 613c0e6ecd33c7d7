"""Budgets (issue 31): before a step is released, spent + expected is compared with
``options.budget``; a limit that would be crossed suspends the run with a budget_exceeded
decision for a person (raise it and continue, or stop); a running step is never stopped;
a resumed run and a fork count nothing twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
