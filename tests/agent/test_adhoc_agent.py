"""Ad-hoc agents at the runtime (issue 37 item 6): the agent a front end makes from a toolbox
(:func:`chainlab.agent.adhoc.agent_request`) is kept in the run's meta, and every runtime
over the same toolbox puts it back where it compiles the run: a resume by another runtime,
a fork (which keeps the definition), and two ad-hoc agents of one name in one runtime each
ask their own model. Real HTTP to a scripted server."""

from __future__ import annotations

import pytest

from chainlab.agent.adhoc import agent_request, run_toolbox
from chainlab.errors import UsageError
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.store.base import ADHOC_META
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop

pytestmark = pytest.mark.anyio


async def test_another_runtime_resumes_and_forks_the_run_with_its_agent(
        shop: Shop, server: FakeOpenAI) -> None:
    ask = agent_request(shop.toolbox, None, "order 7 arrived broken, refund 15",
                        model="fake-model", base_url=server.base_url)
    assert "agent:assistant" not in shop.toolbox  # the user's toolbox is left as it was
    assert ask.meta[ADHOC_META]["tools"] == ["lookup", "refund", "label", "slow", "broken"]
    server.add(tool_calls(Call("lookup", {"order": 7}),
                          Call("refund", {"order": 7, "amount": 15})),
               "Refunded 15 on order 7.")
    store = MemoryStore()
    first = Runtime(shop.toolbox, store)
    run = await first.start(ask.chain, ask.context, meta=ask.meta)
    result = await run.wait()
    assert result.waiting == {"assistant/1.2": "waiting_confirmation"}
    await first.aclose()

    second = Runtime(shop.toolbox, store)  # another process, the same toolbox
    assert second.get_run(run.run_id).compiled() is not None  # a read-only view draws it
    again = await second.resume(run.run_id)
    await again.approve("assistant/1.2")
    result = await again.wait()
    assert result.ok and result.outputs["assistant"] == "Refunded 15 on order 7."
    assert len(server.completions) == 2  # turn 1 answered from the record
    assert shop.tools_called() == [("assistant/1.1", "lookup"), ("assistant/1.2", "refund")]

    fork = await second.fork(run.run_id, meta={"note": "again"})
    assert fork.record.meta[ADHOC_META] == ask.meta[ADHOC_META]
    assert (await fork.wait()).ok  # everything reused: no call, no model asked
    assert len(server.completions) == 2 and len(shop.calls) == 2
    await second.aclose()
    resumed = Runtime(shop.toolbox, store)
    assert resumed.get_run(fork.run_id).compiled() is not None
    await resumed.aclose()


async def test_two_adhoc_agents_of_one_name_in_one_runtime_ask_their_own_model(
        shop: Shop, server: FakeOpenAI) -> None:
    server.add("from a", "from b")
    runtime = Runtime(shop.toolbox, MemoryStore())
    for model in ("model-a", "model-b"):
        ask = agent_request(shop.toolbox, None, "hello", model=model,
                            base_url=server.base_url)
        run = await runtime.start(ask.chain, ask.context, meta=ask.meta)
        assert (await run.wait()).ok
    assert [r.model for r in server.completions] == ["model-a", "model-b"]
    await runtime.aclose()


def test_the_restored_toolbox_is_one_overlay_per_definition(shop: Shop) -> None:
    ask = agent_request(shop.toolbox, None, "hi", model="m", base_url="http://127.0.0.1:9/v1")
    again = run_toolbox(shop.toolbox, dict(ask.meta))
    assert again is ask.toolbox and "agent:assistant" in again
    assert run_toolbox(shop.toolbox, {}) is shop.toolbox

    @shop.toolbox.tool
    def later(order: int) -> int:
        """A tool defined after the overlay: seen through it."""
        return order

    assert "later" in again
    with pytest.raises(UsageError, match="cannot read"):
        run_toolbox(shop.toolbox, {ADHOC_META: {"name": 3}}, "r1")
