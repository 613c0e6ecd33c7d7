"""Step-through control, cancel, confirmation routing and sub-chains (DESIGN §4, §6)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab import PlanError, RunNotActiveError, RunOptions, RunStateError, UnknownStepError
from chainlab.errors import DecisionError
from chainlab.runtime import RunStatus

from .conftest import Harness, S, chain_of

pytestmark = pytest.mark.anyio


async def settle(run: Any) -> None:
    """Let the loop run until nothing changes (tools here only yield, never sleep)."""
    for _ in range(50):
        await anyio.sleep(0)


async def test_start_paused_and_step_releases_exactly_one(h: Harness) -> None:
    h.tracked("work")
    run = await h.runtime.start(chain_of(S("a"), S("b"), S("c", ["a", "b"])), paused=True)
    await settle(run)
    assert run.status == RunStatus.PAUSED
    assert run.ready_steps() == ["a", "b"]
    assert h.starts() == []
    assert await run.step() == "a"
    await settle(run)
    assert h.starts() == ["a"]
    assert run.ready_steps() == ["b"]
    assert await run.step("b") == "b"
    await settle(run)
    assert run.ready_steps() == ["c"] and h.starts() == ["a", "b"]
    await run.unpause()
    result = await run.wait()
    assert result.ok and h.starts() == ["a", "b", "c"]


async def test_step_refuses_a_step_that_is_not_ready(h: Harness) -> None:
    h.tracked("work")
    run = await h.runtime.start(chain_of(S("a"), S("b", ["a"])), paused=True)
    await settle(run)
    with pytest.raises(RunStateError, match="'b' is pending, not ready; ready now: a"):
        await run.step("b")
    with pytest.raises(UnknownStepError, match="did you mean 'a'"):
        await run.step("aa")
    await run.unpause()
    await run.wait()


async def test_breakpoint_pauses_before_the_step_and_wait_does_not_return(h: Harness) -> None:
    h.tracked("work")
    chain = chain_of(S("a"), S("b", ["a"]), S("c", ["b"]))
    run = await h.runtime.start(chain, options=RunOptions(breakpoints=["b"]))
    with anyio.move_on_after(0.3) as scope:
        await run.wait()  # paused runs do not end wait()
    assert scope.cancelled_caught
    assert run.status == RunStatus.PAUSED
    assert h.starts() == ["a"]
    assert run.ready_steps() == ["b"]
    events = h.store.load_events(run.run_id)
    paused = [e for e in events if e.kind == "run_paused"]
    assert paused[-1].payload == {"reason": "breakpoint", "step_id": "b"}
    await run.step()  # runs b; the run stays paused before c
    await settle(run)
    assert h.starts() == ["a", "b"] and run.status == RunStatus.PAUSED
    await run.unpause()
    assert (await run.wait()).ok


async def test_breakpoint_on_unknown_step_is_a_plan_error(h: Harness) -> None:
    h.tracked("work")
    with pytest.raises(PlanError) as err:
        await h.runtime.start(chain_of(S("a")), options=RunOptions(breakpoints=["zz"]))
    assert err.value.codes == ["invalid_field"]


async def test_pause_lets_running_steps_finish_and_releases_nothing(h: Harness) -> None:
    gate = anyio.Event()

    async def slow(tag: str = "") -> str:
        h.log.append(("start", tag))
        await gate.wait()
        return tag

    h.toolbox.tool(slow)
    h.tracked("work")
    run = await h.runtime.start(chain_of(S("a", tool="slow"), S("b", ["a"])))
    await settle(run)
    await run.pause()
    gate.set()
    await settle(run)
    assert run.steps["a"].status == "succeeded"
    assert run.steps["b"].status == "ready" and h.starts() == ["a"]
    await run.unpause()
    assert (await run.wait()).ok


async def test_cancel_stops_running_calls_and_cancels_the_rest(h: Harness) -> None:
    started = anyio.Event()

    async def forever(tag: str = "") -> None:
        started.set()
        await anyio.sleep(3600)

    h.toolbox.tool(forever)
    h.tracked("work")
    run = await h.runtime.start(
        chain_of(S("f", tool="forever"), S("after", ["f"]), S("other", ["f"]))
    )
    await started.wait()
    await run.cancel()
    result = await run.wait()
    assert result.status == RunStatus.CANCELLED
    assert {k: str(v.status) for k, v in run.steps.items()} == {
        "f": "cancelled",
        "after": "cancelled",
        "other": "cancelled",
    }
    assert run.state.attempts[0].status == "cancelled"
    with pytest.raises(RunStateError, match="already cancelled"):
        await run.cancel()


async def test_cancel_of_an_unsafe_call_leaves_it_in_doubt(h: Harness) -> None:
    started = anyio.Event()

    async def charge(tag: str = "") -> None:
        started.set()
        await anyio.sleep(3600)

    h.toolbox.tool(charge, side_effects=True)
    run = await h.runtime.start(chain_of(S("pay", tool="charge")))
    await started.wait()
    await run.cancel()
    result = await run.wait()
    assert result.status == RunStatus.CANCELLED
    assert run.steps["pay"].status == "in_doubt"
    assert h.store.load_events(run.run_id)[-1].payload["in_doubt"] == ["pay"]


async def test_confirmations_are_routed_by_step_id_and_other_branches_run(h: Harness) -> None:
    h.tracked("work")
    h.tracked(
        "send",
        side_effects=True,
        requires_confirmation=True,
        preview=lambda args: f"send to {args['to']}",
    )
    chain = chain_of(
        S("m1", tool="send", args={"to": "ann"}),
        S("m2", tool="send", args={"to": "bob"}),
        S("x"),
        S("y", ["x"]),
        S("after1", ["m1"]),
    )
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.SUSPENDED
    assert result.waiting == {"m1": "waiting_confirmation", "m2": "waiting_confirmation"}
    assert run.steps["y"].status == "succeeded"  # the other branch kept running
    assert run.steps["m2"].preview == "send to bob"
    await run.approve("m2", note="ok for bob")
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED and result.waiting == {"m1": "waiting_confirmation"}
    assert (
        run.steps["m2"].status == "succeeded" and run.steps["m1"].status == "waiting_confirmation"
    )
    await run.reject("m1", reason="not ann")
    result = await run.wait()
    assert result.status == RunStatus.FAILED  # fail_fast, nothing to compensate
    assert (run.steps["after1"].status, run.steps["after1"].reason) == ("skipped", "rejected")
    assert run.steps["m1"].reason == "not ann"


async def test_approve_with_edited_args_runs_exactly_those_after_revalidation(h: Harness) -> None:
    calls = []

    async def send(to: str, amount: int) -> str:
        calls.append((to, amount))
        return f"{to}:{amount}"

    h.toolbox.tool(send, side_effects=True, requires_confirmation=lambda a: a["amount"] > 10)
    chain = chain_of(
        {"id": "small", "tool": "send", "args": {"to": "a", "amount": 5}},
        {"id": "big", "tool": "send", "args": {"to": "b", "amount": 500}},
    )
    run, result, _ = await h.run(chain)
    assert result.waiting == {"big": "waiting_confirmation"}  # callable policy on args
    with pytest.raises(DecisionError, match="amount") as err:
        await run.approve("big", args={"to": "b", "amount": "lots"})
    assert (err.value.step_id, err.value.field) == ("big", "args")
    with pytest.raises(RunStateError, match="cannot approve step 'small'"):
        await run.approve("small")
    await run.approve("big", args={"to": "b", "amount": 50})
    result = await run.wait()
    assert result.ok and calls == [("a", 5), ("b", 50)]
    ev = next(e for e in h.store.load_events(run.run_id) if e.kind == "step_approved")
    assert ev.payload["args"] == {"to": "b", "amount": 50}
    assert run.steps["big"].approval["edited"] is True


async def test_step_confirm_overrides_the_tool(h: Harness) -> None:
    h.tracked("work")
    h.tracked("danger", side_effects=True, requires_confirmation=True)
    chain = chain_of(S("a", confirm=True), S("d", tool="danger", confirm=False))
    run, result, _ = await h.run(chain)
    assert result.waiting == {"a": "waiting_confirmation"}
    assert run.steps["d"].status == "succeeded"


async def test_resolve_in_doubt_three_ways(h: Harness) -> None:
    async def charge(who: str) -> dict:
        raise ValueError("connection dropped after sending")

    h.toolbox.tool(charge, side_effects=True)
    h.tracked("work")
    chain = chain_of(
        {"id": "c1", "tool": "charge", "args": {"who": "a"}},
        {"id": "c2", "tool": "charge", "args": {"who": "b"}},
        {"id": "c3", "tool": "charge", "args": {"who": "c"}},
        S("after", ["c1"], args={"paid": "{{ steps.c1.output }}"}),
        on_failure="continue",
    )
    run, result, _ = await h.run(chain)
    assert result.waiting == {"c1": "in_doubt", "c2": "in_doubt", "c3": "in_doubt"}
    await run.resolve("c1", output={"charged": True})
    await run.resolve("c2", fail=True, note="bank says no")
    with pytest.raises(DecisionError, match="at most one"):
        await run.resolve("c3", retry=True, fail=True)
    await run.resolve("c3", retry=True)  # a person checked: it did not go through
    result = await run.wait()
    assert run.steps["after"].output["paid"] == {"charged": True}
    assert run.steps["c2"].status == "failed" and "bank says no" in run.steps["c2"].error
    assert run.steps["c3"].status == "in_doubt" and run.steps["c3"].attempts == 2


async def test_control_needs_an_active_run(h: Harness) -> None:
    h.tracked("work")
    run, _, _ = await h.run(chain_of(S("a")))
    other = Harness()
    other.store = h.store
    from chainlab.runtime import Runtime

    view = Runtime(h.toolbox, h.store).get_run(run.run_id)
    assert view.status == RunStatus.SUCCEEDED and view.outputs["a"]["tag"] == "a"
    with pytest.raises(RunNotActiveError, match=r"runtime\.resume"):
        await view.approve("a")


async def test_subchain_runs_children_namespaced_on_the_same_scheduler(h: Harness) -> None:
    from chainlab import Chain

    h.tracked("work", yields=3)
    child = Chain.from_dict(
        {
            "name": "estimate",
            "steps": [
                S("p1", args={"who": "{{ context.team }}"}),
                S("p2"),
                S("sum", ["p1", "p2"], args={"n": "{{ steps.p1.output.who }}"}),
            ],
        }
    )
    h.toolbox.add_chain(child)
    chain = chain_of(
        S("plan"),
        {"id": "est", "tool": "chain:estimate", "depends_on": ["plan"], "args": {"team": "core"}},
        S("slow"),
        S("done", args={"total": "{{ steps.est.output.sum.n }}"}),
        max_concurrency=2,
    )
    run, result, _ = await h.run(chain)
    assert result.ok, result
    assert set(run.steps) >= {"est/p1", "est/p2", "est/sum"}
    assert run.outputs["done"]["total"] == "core"
    assert run.outputs["est"]["p1"]["who"] == "core"
    # the parent holds no slot: with 2 slots, both children ran at once
    starts = h.starts()
    assert starts[:2] == ["plan", "slow"]
    assert h.max_active == 2
    spans = {tag: i for i, (kind, tag) in enumerate(h.log) if kind == "start"}
    ends = {tag: i for i, (kind, tag) in enumerate(h.log) if kind == "end"}
    assert spans["p2"] < ends["p1"]  # p1 and p2 overlapped


async def test_subchain_failure_fails_the_parent_step(h: Harness) -> None:
    from chainlab import Chain

    h.tracked("work")

    async def boom(tag: str = "") -> None:
        raise ValueError("child broke")

    h.toolbox.tool(boom, retry={"max_attempts": 1})
    h.toolbox.add_chain(
        Chain.from_dict(
            {
                "name": "sub",
                "steps": [S("ok1"), S("bad", ["ok1"], tool="boom"), S("never", ["bad"])],
            }
        )
    )
    chain = chain_of({"id": "s", "tool": "chain:sub"}, S("after", ["s"]))
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.FAILED
    assert {k: str(v.status) for k, v in run.steps.items()} == {
        "s": "failed",
        "s/ok1": "succeeded",
        "s/bad": "failed",
        "s/never": "skipped",
        "after": "skipped",
    }
