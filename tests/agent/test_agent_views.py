"""Agent steps where people see them (issue 37 item 6): the JSON view (``chainlab show
--json``, the HTTP service) lists an agent step's turns and their calls, and the DAG draws
the step as a cluster of its turns, each turn's calls side by side under it, read from the
run's log by the agent kind's own module. Step-through pauses before each model turn."""

from __future__ import annotations

import json

import pytest

from chainlab.agent.turns import TurnShape
from chainlab.render.display import agent_turns, run_badges, run_dot, run_drawing, run_statuses
from chainlab.render.dot import CALLS_DRAWN
from chainlab.render.json import run_dict
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, run_agent, start
from .test_agent_steps import until

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


async def test_the_dag_draws_an_agent_step_as_a_cluster_of_its_turns_and_their_calls(
        shop: Shop, server: FakeOpenAI) -> None:
    runtime, run, result = await run_agent(
        shop, server, tool_calls(Call("lookup", {"order": 7}),
                                 Call("refund", {"order": 7, "amount": 15})),
        Call("label", {"order": 7, "text": "refunded"}), "Refunded.")
    assert result.suspended
    # each call is a node of its own, with its own status
    assert run_statuses(run) == {"help": "running", "help/1.1": "succeeded",
                                 "help/1.2": "waiting_confirmation"}
    assert run_badges(run)["help"] == "✓ 1 · ☐ 1 awaiting approval"
    assert agent_turns(run) == {"help": (TurnShape(1, (("help/1.1", "lookup"),
                                                       ("help/1.2", "refund")),
                                                   tokens=agent_turns(run)["help"][0].tokens),)}
    text = run_dot(run)
    cluster = _block(text, "cluster_help")
    assert 'label="✦ help · agent:support\\l▶ running · ✓ 1 · ☐ 1 awaiting approval\\l"' in cluster
    assert '"help#t1"' in cluster and "✦ turn 1 · 2 calls" in cluster
    assert '{rank=same; "help/1.1"; "help/1.2"}' in cluster  # a turn's calls side by side
    assert '"help#t1" -> "help/1.1"' in cluster and '"help#t1" -> "help/1.2"' in cluster
    assert 'label="help/1.2\\n☐⚡ refund\\n☐ awaiting approval"' in cluster
    assert "help#t2" not in text  # the next turn waits for the refund: not drawn yet

    await run.approve("help/1.2")
    assert (await run.wait()).ok
    turns = agent_turns(run)["help"]
    assert [(t.turn, [c for c, _ in t.calls], t.final) for t in turns] == [
        (1, ["help/1.1", "help/1.2"], False), (2, ["help/2.1"], False), (3, [], True)]
    text = run_dot(run)
    cluster = _block(text, "cluster_help")
    # each call's node leads to the next turn, the last turn is the final answer
    assert '"help/1.1" -> "help#t2"' in cluster and '"help/1.2" -> "help#t2"' in cluster
    assert '"help#t2" -> "help/2.1"' in cluster and '"help/2.1" -> "help#t3"' in cluster
    assert "✦ turn 3 · final answer" in cluster
    assert all(f"{t.tokens:,} tokens" in cluster for t in turns)
    await runtime.aclose()


async def test_a_step_between_turns_shows_its_next_turn_and_a_prompt_step_stays_a_node(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(Call("lookup", {"order": 7}), "Delivered.")
    runtime, run = await start(shop, agent_chain(), paused=True)  # step-through: it stops
    await until(lambda: run.steps["help"].status == "ready")  # before the first turn...
    assert agent_turns(run) == {}
    assert "cluster_help" not in run_dot(run)  # nothing grown yet: one node
    await run.step("help")
    await until(lambda: run.steps.get("help/1.1") is not None)
    await run.step("help/1.1")
    await until(lambda: run.steps["help"].status == "ready")  # ...and before the second
    assert len(server.completions) == 1  # the model is not asked while the run is paused
    assert [(t.turn, t.next) for t in agent_turns(run)["help"]] == [(1, False), (2, True)]
    assert "✦ turn 2 · next" in _block(run_dot(run), "cluster_help")
    await run.step("help")
    await until(lambda: run.steps["help"].status == "succeeded")
    await run.unpause()  # (a paused run does not end by itself, DESIGN §5)
    assert (await run.wait()).ok and len(server.completions) == 2
    await runtime.aclose()

    prompt = Shop()
    with FakeOpenAI() as other:
        runtime, run, result = await run_agent(prompt, other, "Hello.", tools=[])
    assert result.ok and agent_turns(run) == {}
    assert "cluster_help" not in run_dot(run) and "✦ agent:support" in run_dot(run)
    await runtime.aclose()


async def test_a_long_agent_is_drawn_within_bounds(shop: Shop, server: FakeOpenAI) -> None:
    # 10 turns of 9 calls: the last TURNS_DRAWN turns with CALLS_DRAWN calls each are drawn,
    # the rest counted on one node per turn and one for the turns before
    turns = [tool_calls(*(Call("lookup", {"order": 10 * t + i}) for i in range(9)))
             for t in range(10)]
    runtime, run, result = await run_agent(shop, server, *turns, "Looked them all up.",
                                           max_turns=12)
    assert result.ok
    drawing = run_drawing(run)
    cluster = _block(drawing.dot, "cluster_help")
    assert "✦ turns 1 to 3" in cluster and "27 calls" in cluster  # 10 + final = 11 turns
    assert cluster.count("+3 more calls") == 7
    drawn_calls = [s for s in drawing.steps if s.startswith("help/")]
    assert len(drawn_calls) == 7 * CALLS_DRAWN  # turns 4-10; turn 11 is the final answer
    assert "help/1.1" not in drawing.steps and "help/10.6" in drawing.steps
    await runtime.aclose()


def _block(dot: str, name: str) -> str:
    """The text of subgraph ``name`` in a DOT text (up to its closing brace)."""
    start = dot.index(f'subgraph "{name}"')
    depth, i = 0, dot.index("{", start)
    for j in range(i, len(dot)):
        depth += {"{": 1, "}": -1}.get(dot[j], 0)
        if depth == 0:
            return dot[start:j + 1]
    raise AssertionError(f"unclosed subgraph {name}")
