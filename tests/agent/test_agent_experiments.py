"""Experiments over agent runs (DESIGN §22), over real HTTP to the scripted server: a model
request identical to a recorded one is answered from the recording (the server is not asked,
no tokens); new instructions ask the change's model (its usage counted); a recorded refund is
never made again and a NEW refund stops the replay at needs_live_effect."""

from __future__ import annotations

import pytest

from chainlab import Agent
from chainlab.runtime import RunStatus, Runtime
from chainlab.testing.openai_script import Call, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, start

pytestmark = pytest.mark.anyio


async def recorded_refund(shop: Shop, server: FakeOpenAI) -> tuple[Runtime, str]:
    shop.agent(server, tools=["lookup", "refund"])
    server.add(tool_calls(Call("refund", {"order": 7, "amount": 15}),
                          usage={"prompt_tokens": 50, "completion_tokens": 10}),
               Reply("Refunded 15 on order 7.",
                     usage={"prompt_tokens": 70, "completion_tokens": 8}))
    runtime, run = await start(shop, agent_chain())
    await run.wait()
    await runtime.decide(run.run_id, "help/1.1", "approve")
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    return runtime, run.run_id


def new_agent(server: FakeOpenAI, instructions: str) -> Agent:
    return Agent("support", instructions, tools=["lookup", "refund"], model="fake-model",
                 base_url=server.base_url, api_key="test")


async def test_an_unchanged_agent_is_answered_from_the_recording(shop: Shop,
                                                                 server: FakeOpenAI) -> None:
    runtime, run_id = await recorded_refund(shop, server)
    asked, refunds = len(server.completions), len(shop.calls)
    exp = await runtime.experiment([run_id])
    row = exp.rows()[0]
    assert row["outcome"] == "same" and row["status_after"] == "succeeded"
    assert len(server.completions) == asked  # every request identical: not asked again
    assert len(shop.calls) == refunds  # the refund answered from the recording
    assert row["tokens_before"] > 0 and row["tokens_after"] == 0


async def test_new_instructions_ask_the_model_and_a_new_refund_is_not_made(
        shop: Shop, server: FakeOpenAI) -> None:
    runtime, run_id = await recorded_refund(shop, server)
    asked, refunds = len(server.completions), len(shop.calls)
    # run 1 of the change: the same refund (answered from the recording), a new answer
    server.add(tool_calls(Call("refund", {"order": 7, "amount": 15}),
                          usage={"prompt_tokens": 55, "completion_tokens": 10}),
               Reply("Refunded 15, sorry for the trouble.",
                     usage={"prompt_tokens": 75, "completion_tokens": 9}))
    kind = new_agent(server, "You help customers. Apologise.")
    exp = await runtime.experiment([run_id], agents={"support": kind})
    row = exp.rows()[0]
    assert row["outcome"] == "changed" and row["effects_made"] == 0
    assert row["output_after"] == "Refunded 15, sorry for the trouble."
    assert row["tokens_after"] == 55 + 10 + 75 + 9  # the change's model, counted
    assert len(server.completions) == asked + 2 and len(shop.calls) == refunds
    assert "Apologise" in server.completions[-1].messages[0]["content"]
    # a change that refunds more: a NEW refund, not made, the replay stops there
    server.add(tool_calls(Call("refund", {"order": 7, "amount": 20})))
    generous = new_agent(server, "You help customers. Refund 20.")
    exp = await runtime.experiment([run_id], agents={"support": generous})
    row = exp.rows()[0]
    assert row["outcome"] == "needs_live_effect"
    assert row["needs_live_effect"] == ['help/1.1=refund({"amount": 20, "order": 7})']
    assert len(shop.calls) == refunds  # no refund was made
    assert "needs_live_effect: NOT made" in exp.diff(run_id)
