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

@shop.tool(side_effects=True, requires_confirmation=True,
           compensate=("unrefund", {"order": "{{ input.order }}"}))
def refund(order: int, amount: int) -> dict:
    """Refund part of an order."""
    refunds.append((order, amount))
    return {"order": order, "refunded": amount}

@shop.tool(side_effects=True, idempotent=True)
def unrefund(order: int) -> None:
    """Take a refund back (refund's compensation)."""

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



async def _restart(sh: Harness) -> None:
    """What a kernel restart leaves: the store on disk, nothing of the session (its
    runtimes closed, its namespace empty: the notebook's cells run again)."""
    from chainlab.jupyter import load_ipython_extension
    from chainlab.jupyter import session as session_module
    from chainlab.jupyter.runloop import RunLoop

    await sh.settle()
    old = session_module._SESSIONS.pop(id(sh.ip))
    for rt in old.runtimes.values():
        await rt.aclose()
    for w in old.widgets.values():
        w.close()
    old.close()
    sh.ns.clear()
    sh.ip.init_user_ns()
    load_ipython_extension(sh.ip)
    session_module.get_session(sh.ip).loop = RunLoop.shared()


async def test_an_adhoc_agent_is_found_again_after_a_kernel_restart(sh: Harness) -> None:
    """``%chain agent "REQUEST" --model M --base-url URL``: no registered agent; the run
    keeps the agent, so after a restart ``%chain resume`` and ``%chain approve`` find it,
    and the model is not asked again for the turn already recorded."""
    with FakeOpenAI([tool_calls(Call("lookup", {"order": 7}),
                                Call("refund", {"order": 7, "amount": 15})),
                     "Refunded 15 on order 7."]) as server:
        sh.ns["URL"] = "http://127.0.0.1:9/v1"  # the registered agent's: never asked here
        await sh.ok(TOOLS)
        await sh.ok(f'run = %chain agent "order 7 arrived broken" --tools shop --model '
                    f'fake-model --base-url {server.base_url}')
        run = sh.ns["run"]
        run_id = run.run_id
        assert run.chain.name == "agent-assistant"
        assert any("RunWidget" in text for text in sh.displayed())
        result = await sh.ok("await run.wait()")
        assert result.waiting == {"assistant/1.2": "waiting_confirmation"}
        assert sorted(t["function"]["name"] for t in server.completions[0].body["tools"]) \
            == ["lookup", "refund"]  # not unrefund (the saga's), not the agent support
        assert server.completions[0].model == "fake-model"

        await _restart(sh)
        sh.ns["URL"] = "http://127.0.0.1:9/v1"
        await sh.ok(TOOLS)
        await sh.ok(f"run = %chain resume {run_id} --tools shop")
        await sh.ok(f"%chain approve {run_id} assistant/1.2 --tools shop")
        result = await sh.ok("await run.wait()")
        assert result.ok, result
        assert result.outputs["assistant"] == "Refunded 15 on order 7."
        assert sh.ns["refunds"] == [(7, 15)]
        assert len(server.completions) == 2  # turn 1 answered from the record
        assert server.completions[1].model == "fake-model"


@pytest.mark.parametrize(("line", "says"), [
    ('%chain agent "  " --tools shop --model m --base-url http://127.0.0.1:9/v1',
     "the request is empty"),
    ('%chain agent "hello" --tools shop --model m --base-url ftp://127.0.0.1/v1',
     "--base-url 'ftp://127.0.0.1/v1' is not an http(s) URL"),
    ('%chain agent support "hello" --tools shop --model m',
     "--model is for an ad-hoc agent, but 'support' is a registered one"),
    ('%chain agent suport "hello" --tools shop', "did you mean 'agent:support'"),
    ('%chain agent "hello" --tools empty --model m --base-url http://127.0.0.1:9/v1',
     "toolbox 'empty' has no tool an ad-hoc agent can call"),
    ('%chain agent support --tools shop', '%chain agent support "REQUEST"'),
    # a key in the base URL: refused by the one check, the message naming the safe way
    # and never holding the key
    ('%chain agent "hello" --tools shop --model m --base-url '
     'http://127.0.0.1:9/v1?api-key=sk-never-kept-42',
     "--base-url carries a credential (the query parameter 'api-key')"),
    ('%chain plan "hello" --as c --tools shop --model m --base-url '
     'http://me:sk-never-kept-42@h/v1',
     "base_url carries a credential (user-info before '@')"),
])
async def test_bad_input_is_a_usage_error(sh: Harness, line: str, says: str) -> None:
    sh.ns["URL"] = "http://127.0.0.1:9/v1"
    await sh.ok(TOOLS + '\nempty = chainlab.Toolbox("empty")')
    msg = await sh.usage_error(line)
    assert says in msg, msg
    assert "sk-never-kept-42" not in msg + "".join(sh.displayed())
    assert not sh.session.runs  # nothing started


async def test_an_agent_started_with_step_asks_its_model_one_turn_per_step(
        sh: Harness) -> None:
    """``%chain agent ... --step``: step-through from the first turn; the model is asked
    only when Step releases the agent step, before each turn."""
    with FakeOpenAI([Call("lookup", {"order": 7}), "Order 7 totals 40."]) as server:
        sh.ns["URL"] = server.base_url
        await sh.ok(TOOLS)
        await sh.ok('run = %chain agent support "how much was order 7?" --tools shop --step')
        run = sh.ns["run"]

        async def until(check: str) -> None:
            await sh.ok("import asyncio\nfor _ in range(1000):\n"
                        f"    if {check}: break\n    await asyncio.sleep(0.01)")
            assert sh.ns.get("run") is run and eval(check, {"run": run}), check

        await until("run.ready_steps() == ['support']")
        assert run.paused and len(server.completions) == 0
        for step_id, then, asked in (
                ("support", "'support/1.1' in run.steps", 1),  # turn 1 asked for a call
                ("support/1.1", "run.steps['support'].status == 'ready'", 1),  # turn 2 waits
                ("support", "run.steps['support'].status == 'succeeded'", 2)):
            await until(f"{step_id!r} in run.ready_steps()")
            await sh.ok(f"await run.step({step_id!r})")
            await until(then)
            assert len(server.completions) == asked, step_id
        await sh.ok("await run.unpause()")
        result = await sh.ok("await run.wait()")
        assert result.ok and result.outputs["support"] == "Order 7 totals 40."
