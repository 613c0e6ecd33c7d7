"""Agent steps where people see them (issue 37 item 6): the JSON view (``chainlab show
--json``, the HTTP service) lists an agent step's turns and their calls, read from the run's
log by the agent kind's own module."""

from __future__ import annotations

import json

import pytest

from chainlab.render.display import run_badges, run_dot, run_statuses
from chainlab.render.json import run_dict
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, run_agent

pytestmark = pytest.mark.anyio


async def test_the_json_view_lists_each_turn_with_its_calls(shop: Shop,
                                                            server: FakeOpenAI) -> None:
    runtime, run, result = await run_agent(
        shop, server,
        tool_calls(Call("lookup", {"order": 7}), Call("teleport", {"order": 7}),
                   Call("broken", {"order": 7})),
        Call("label", {"order": 7, "text": "checked"}),
        "Order 7 is labelled.")
    assert result.ok
    view = run_dict(runtime.store.get_run(run.run_id), run.state)
    json.dumps(view)  # plain JSON data
    steps = view["steps"]
    # the calls that ran are steps, named by their place in the model's answer
    assert list(steps) == ["help", "help/1.1", "help/1.3", "help/2.1"]
    turns = steps["help"]["turns"]
    assert [(t["turn"], t["final"]) for t in turns] == [(1, False), (2, False), (3, True)]
    assert turns[0]["calls"] == [
        {"step_id": "help/1.1", "tool": "lookup", "status": "succeeded"},
        {"step_id": None, "function": "teleport",
         "refused": "unknown tool 'teleport'. The tools are: lookup, refund, label, slow, "
                    "broken"},
        {"step_id": "help/1.3", "tool": "broken", "status": "failed"}]
    assert turns[1]["calls"] == [{"step_id": "help/2.1", "tool": "label",
                                  "status": "succeeded"}]
    assert turns[2]["calls"] == []
    assert all(t["usage"]["tokens"] > 0 for t in turns)
    # only the agent step has turns: its calls are ordinary steps
    assert [step_id for step_id, s in steps.items() if "turns" in s] == ["help"]
    await runtime.aclose()


async def test_a_prompt_step_is_listed_with_its_one_turn_and_a_waiting_call_as_such(
        shop: Shop, server: FakeOpenAI) -> None:
    runtime, run, result = await run_agent(
        shop, server, Call("refund", {"order": 7, "amount": 15}), "Refunded.")
    assert result.suspended
    view = run_dict(runtime.store.get_run(run.run_id), run.state)
    assert view["steps"]["help"]["turns"] == [
        {"turn": 1, "calls": [{"step_id": "help/1.1", "tool": "refund",
                               "status": "waiting_confirmation"}],
         "usage": view["steps"]["help"]["turns"][0]["usage"], "final": False}]
    assert [w["step_id"] for w in view["waiting"]] == ["help/1.1"]
    await runtime.aclose()

    prompt = Shop()
    with FakeOpenAI() as other:
        runtime, run, result = await run_agent(prompt, other, "Hello.", tools=[])
        assert result.ok
        view = run_dict(runtime.store.get_run(run.run_id), run.state)
    assert [(t["turn"], t["calls"], t["final"]) for t in view["steps"]["help"]["turns"]] == [
        (1, [], True)]
    await runtime.aclose()


async def test_the_dag_draws_an_agent_step_as_one_node_counting_its_calls(
        shop: Shop, server: FakeOpenAI) -> None:
    # the same drawing as a for_each step's: one node, its grown steps counted by status
    runtime, run, result = await run_agent(
        shop, server, tool_calls(Call("lookup", {"order": 7}),
                                 Call("refund", {"order": 7, "amount": 15})), "Refunded.")
    assert result.suspended
    assert run_statuses(run) == {"help": "running"}  # no node per call
    assert run_badges(run) == {"help": "✓ 1 · ☐ 1 awaiting approval"}
    text = run_dot(run)
    assert "help/1." not in text
    assert 'label="help\\nagent:support\\n▶ running · ✓ 1 · ☐ 1 awaiting approval"' in text
    await runtime.aclose()
