"""An agent step's limits wait for a person (raise and go on, or stop), never a crash and
never a silent end; when the agent step fails or the run is rolled back, its completed
calls are compensated in reverse completion order, like any steps."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Agent, DecisionError, RunOptions
from chainlab.events import EventKind, StepStatus
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, by_turn, start, tool_messages

pytestmark = pytest.mark.anyio
K = EventKind


def labeller(turns: int) -> list[object]:
    """A model that labels order N at turn N, then answers after ``turns`` turns."""
    return [Call("label", {"order": n, "text": f"t{n}"}) for n in range(1, turns + 1)] + [
        f"labelled {turns} orders"]


async def test_max_turns_waits_for_a_person_who_lets_it_take_one_more_or_raises_it(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server, max_turns=2)
    server.add(*labeller(4))
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED  # never a crash, never a silent end
    assert run.waiting() == {"help": "waiting_confirmation"}
    st = run.steps["help"]
    assert st.reason == "limit_reached"
    assert "has taken its 2 turns (max_turns=2)" in st.preview
    assert len(server.completions) == 2
    await run.approve("help")  # one more turn
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED and len(server.completions) == 3
    # raising the limit is an approval with the agent step's args edited (validated)
    with pytest.raises(DecisionError, match="max_turns"):
        await run.approve("help", args={"request": st.args["request"], "max_turns": 0})
    await run.approve("help", args={**st.args, "max_turns": 10})
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["help"] == "labelled 4 orders"
    assert [o for _, t, a in shop.calls if t == "label" for o in [a["order"]]] == [1, 2, 3, 4]
    await runtime.aclose()


async def test_stopping_at_the_limit_rejects_the_step_and_undoes_its_calls_in_reverse(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server, max_turns=3)
    server.add(*labeller(5))
    runtime, run = await start(shop, agent_chain())
    await run.wait()
    await run.reject("help", "enough")
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert run.steps["help"].status == StepStatus.REJECTED
    undo = [(step, args["order"]) for step, tool, args in shop.calls if tool == "unlabel"]
    assert undo == [("help/3.1", 3), ("help/2.1", 2), ("help/1.1", 1)]
    await runtime.aclose()


async def test_a_failed_agent_step_undoes_its_completed_calls_in_reverse_completion_order(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("label", {"order": 1, "text": "a"}),
                          Call("label", {"order": 2, "text": "b"})),
               Call("label", {"order": 3, "text": "c"}), 400)
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert run.steps["help"].status == StepStatus.FAILED
    done = [s for s in run.state.completion if s.startswith("help/")]
    undone = [step for step, tool, _ in shop.calls if tool == "unlabel"]
    assert undone == list(reversed(done)) and len(undone) == 3
    await runtime.aclose()


async def test_a_rollback_after_success_undoes_the_agents_calls(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(*labeller(2))
    runtime, run = await start(shop, agent_chain())
    assert (await run.wait()).ok
    await run.rollback()
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert [s for s, t, _ in shop.calls if t == "unlabel"] == ["help/2.1", "help/1.1"]
    assert run.steps["help"].status == StepStatus.COMPENSATED
    await runtime.aclose()


async def test_the_runs_budget_is_checked_before_each_model_turn(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(by_turn(*labeller(3)), by_turn(*labeller(3)), by_turn(*labeller(3)),
               by_turn(*labeller(3)))
    runtime, run = await start(shop, agent_chain(), options=RunOptions.model_validate(
        {"budget": {"max_tokens": 60}}))
    result = await run.wait()
    # turns 1 and 2 spent 55 tokens; turn 3 would cross 60 (the mean of a turn): it waits
    # BEFORE the model is asked, as a budget decision
    assert result.status == RunStatus.SUSPENDED
    assert run.waiting() == {"help": "waiting_confirmation"}
    st = run.steps["help"]
    assert st.reason == "budget_exceeded" and len(server.completions) == 2
    assert st.preview.startswith(f"budget exceeded: tokens: {run.state.usage['tokens']} spent")
    await run.approve("help", budget={"max_tokens": 10_000})
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["help"] == "labelled 3 orders"
    assert len(server.completions) == 4
    await runtime.aclose()


async def test_a_fork_reuses_the_agents_answer_or_asks_again_with_its_effects_confirmed(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("lookup", {"order": 7}), Call("label", {"order": 7,
                                                                       "text": "a"})),
               "labelled", tool_calls(Call("lookup", {"order": 7}),
                                      Call("label", {"order": 7, "text": "b"})), "again")
    runtime, run = await start(shop, agent_chain())
    assert (await run.wait()).ok
    plan = await runtime.fork_plan(run.run_id)
    assert [(r.step_id, str(r.decision)) for r in plan.rows] == [("help", "reuse")]
    reused = await runtime.fork(run.run_id)
    assert (await reused.wait()).outputs == {"help": "labelled"}  # the model not asked
    assert len(server.completions) == 2
    again = await runtime.fork(run.run_id, rerun=["help"])
    result = await again.wait()
    # the agent is asked anew; its call that changes the world waits for a person (the
    # parent's agent may have made it already), the effect-free one runs
    assert result.status == RunStatus.SUSPENDED
    assert again.waiting() == {"help/1.2": "waiting_confirmation"}
    assert again.steps["help/1.1"].status == StepStatus.SUCCEEDED
    await again.approve("help/1.2")
    assert (await again.wait()).outputs["help"] == "again"
    assert [a["text"] for _, t, a in shop.calls if t == "label"] == ["a", "b"]
    await runtime.aclose()


def billing_turns(request: RecordedRequest) -> Any:
    """A sub-agent that looks an order up at every turn (it never answers on its own)."""
    turn = 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
    return Call("lookup", {"order": turn})


async def test_a_model_cannot_raise_its_sub_agents_limits_a_person_can(
        shop: Shop, server: FakeOpenAI) -> None:
    with FakeOpenAI() as billing_server:
        billing_server.add(*[billing_turns] * 5)
        shop.toolbox.add_agent(Agent("billing", "You answer billing questions.", ["lookup"],
                                     model="m", base_url=billing_server.base_url,
                                     max_turns=2))
        shop.agent(server, tools=["lookup", "agent:billing"])
        server.add(Call("agent__billing", {"request": "go", "max_turns": 12}),
                   Call("agent__billing", {"request": "go", "max_calls_per_turn": 99}),
                   Call("agent__billing", {"request": "go"}))
        runtime, run = await start(shop, agent_chain())
        result = await run.wait()
        # the limits are not among the parameters the model sees for the sub-agent
        offered = {t["function"]["name"]: t["function"]["parameters"]
                   for t in server.completions[0].tools or []}
        assert set(offered["agent__billing"]["properties"]) == {"request"}
        assert offered["agent__billing"].get("additionalProperties") is False
        # a call that still passes one is refused to the model, naming who raises it
        told = [text for _, text in tool_messages(server.completions[2])]
        for key, text in zip(("max_turns", "max_calls_per_turn"), told, strict=True):
            assert text.startswith(f"error: the arguments do not fit 'agent__billing': {key} ")
            assert "a person" in text
        assert "help/1.1" not in run.steps and "help/2.1" not in run.steps
        # the sub-agent ran within its own limit: 2 turns, then it waits for a person
        assert result.status == RunStatus.SUSPENDED
        assert run.waiting() == {"help/3.1": "waiting_confirmation"}
        assert run.steps["help/3.1"].reason == "limit_reached"
        assert len(billing_server.completions) == 2
        # a person raises it, as for any agent
        await run.approve("help/3.1", args={"request": "go", "max_turns": 3})
        assert (await run.wait()).status == RunStatus.SUSPENDED
        assert len(billing_server.completions) == 3
        assert run.steps["help/3.1"].reason == "limit_reached"
        await runtime.aclose()
