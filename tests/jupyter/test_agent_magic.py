"""``%chain agent NAME "REQUEST"`` (issue 37 item 6): one registered agent asked one request
in a notebook, as a one-step chain started like ``%chain run`` starts a chain (the same
start, the same widget): its calls wait for a person with their own args, approved with
``%chain approve`` as any step."""

from __future__ import annotations

import pytest

from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Harness

pytestmark = pytest.mark.anyio

TOOLS = '''import chainlab
shop = chainlab.Toolbox("shop")
refunds = []

@shop.tool
def lookup(order: int) -> dict:
    """Find an order."""
    return {"order": order, "total": 40}

@shop.tool(side_effects=True, requires_confirmation=True)
def refund(order: int, amount: int) -> dict:
    """Refund part of an order."""
    refunds.append((order, amount))
    return {"order": order, "refunded": amount}

shop.add_agent(chainlab.Agent("support", "You help customers.", ["lookup", "refund"],
                              model="fake-model", base_url=URL, api_key="test"))
'''


async def test_an_agent_runs_as_a_one_step_chain_with_its_widget(sh: Harness) -> None:
    with FakeOpenAI([tool_calls(Call("lookup", {"order": 7}),
                                Call("refund", {"order": 7, "amount": 15})),
                     "Refunded 15 on order 7."]) as server:
        sh.ns["URL"] = server.base_url
        await sh.ok(TOOLS)
        await sh.ok('run = %chain agent support "order 7 arrived broken" --tools shop')
        run = sh.ns["run"]
        assert run.chain.name == "agent-support"
        assert any("RunWidget" in text for text in sh.displayed())
        result = await sh.ok("await run.wait()")
        assert result.waiting == {"support/1.2": "waiting_confirmation"}
        assert sh.ns["refunds"] == []
        await sh.ok("%chain approve {run.run_id} support/1.2".replace(
            "{run.run_id}", run.run_id))
        result = await sh.ok("await run.wait()")
        assert result.ok and result.outputs["support"] == "Refunded 15 on order 7."
        assert sh.ns["refunds"] == [(7, 15)]
        assert len(server.completions) == 2


async def test_an_unknown_agent_is_a_usage_error_naming_the_agents(sh: Harness) -> None:
    sh.ns["URL"] = "http://127.0.0.1:9/v1"
    await sh.ok(TOOLS)
    msg = await sh.usage_error('%chain agent suport "hello" --tools shop')
    assert "unknown tool 'agent:suport'; did you mean 'agent:support'?" in msg
