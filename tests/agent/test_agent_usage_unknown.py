"""A model server's usage that cannot be taken (negative, NaN, over the limit) is recorded as
unknown with the turn, never dropped silently: the turn counts the step's expected usage in
its stead for the run's budget, and every view of the turn says so (issue 44: such usage was
dropped and budgets counted nothing for the turn)."""

from __future__ import annotations

import json
import math

import pytest

from chainlab import RunOptions
from chainlab.cli.driving import turns_lines
from chainlab.jupyter.run_widget.transcript import transcript_html
from chainlab.render.json import run_dict
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, start

pytestmark = pytest.mark.anyio


def lookup(order: int, usage: dict[str, float]) -> Reply:
    return tool_calls(Call("lookup", {"order": order}), usage=usage)  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "said"), [
    (-5, "prompt_tokens=-5"), (math.nan, "prompt_tokens=nan"),
    (10**16, "prompt_tokens=10000000000000000")])
async def test_a_turns_bad_usage_is_unknown_and_counted_as_expected_for_the_budget(
        shop: Shop, server: FakeOpenAI, bad: float, said: str) -> None:
    shop.agent(server)
    server.add(lookup(1, {"prompt_tokens": 90, "completion_tokens": 10}),
               lookup(2, {"prompt_tokens": bad, "completion_tokens": 10}),
               lookup(3, {"prompt_tokens": 90, "completion_tokens": 10}), "done")
    runtime, run = await start(shop, agent_chain(), options=RunOptions.model_validate(
        {"budget": {"max_tokens": 250}}))
    result = await run.wait()
    # turn 2 counts as turn 1 did (100 tokens): 200 spent + 100 expected > 250, so turn 3
    # waits before the model is asked (counted as nothing, it was asked: 100 + 50 < 250)
    assert result.status == RunStatus.SUSPENDED
    assert run.steps["help"].reason == "budget_exceeded"
    assert len(server.completions) == 2
    assert run.state.usage["tokens"] == 200 and run.state.usage["estimated_calls"] == 1
    turn = run.transcript("help")[1]
    assert turn["usage"] == {"tokens": 100, "estimated_calls": 1}
    assert turn["usage_unknown"].startswith(f"the server reported {said}, "
                                            "completion_tokens=10 (usage 'input_tokens' must")
    # where a person looks: chainlab show, the JSON view (HTTP), the inspector's transcript
    note = f"usage unknown: the server reported {said}, completion_tokens=10"
    lines = turns_lines(run.state)
    assert note in lines[1] and "counted as expected: 100 tokens" in lines[1]
    assert note not in lines[0]
    view = run_dict(runtime.store.get_run(run.run_id), run.state)
    turns = json.loads(json.dumps(view))["steps"]["help"]["turns"]
    assert [("usage_unknown" in t) for t in turns] == [False, True]
    assert note in transcript_html(run.state, "help")
    await runtime.aclose()


async def test_unknown_usage_with_nothing_to_count_asks_a_person_under_a_budget(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(lookup(1, {"prompt_tokens": math.nan, "completion_tokens": 10}),
               Reply(content="done", usage={"prompt_tokens": 90, "completion_tokens": 10}))
    runtime, run = await start(shop, agent_chain(), options=RunOptions.model_validate(
        {"budget": {"max_tokens": 10_000}}))
    result = await run.wait()
    # a first turn has no estimate: its usage counts nothing, so the budget cannot be
    # trusted: the next turn waits for a person instead of being asked blind
    assert result.status == RunStatus.SUSPENDED and len(server.completions) == 1
    st = run.steps["help"]
    assert st.reason == "budget_exceeded"
    assert "usage unknown: 1 of its calls reported usage that could not be taken" in st.preview
    assert run.transcript("help")[0]["usage"] == {"estimated_calls": 1}
    await run.approve("help")  # a person lets it go on
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED and result.outputs["help"] == "done"
    final = run.transcript("help")[-1]
    assert final["final"] and final["usage_unknown"] is None
    await runtime.aclose()


async def test_without_a_budget_unknown_usage_is_only_noted(shop: Shop,
                                                            server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(Reply(content="done", usage={"prompt_tokens": -1, "completion_tokens": 10}))
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    final = run.transcript("help")[-1]  # the final answer's turn carries the note too
    assert final["final"] and final["usage_unknown"].startswith(
        "the server reported prompt_tokens=-1")
    assert "usage unknown: the server reported prompt_tokens=-1" in turns_lines(run.state)[0]
    await runtime.aclose()
