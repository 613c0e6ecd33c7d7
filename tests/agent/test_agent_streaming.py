"""Streamed model text (issue 48 item 1): with ``Agent(stream=True)`` the pieces of a turn's
text and of its tool calls' arguments reach ``run.subscribe(fn, deltas=True)`` as they
arrive, as ``model_delta`` notifications, through the real ``openai`` client streaming from
the scripted server; they are never stored (the turn is recorded whole when it ends), and a
subscriber without ``deltas`` never sees them."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab.agent.model import MODEL_DELTA, ModelDelta
from chainlab.events import EventKind
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, start

pytestmark = pytest.mark.anyio

ANSWER = "Order 7 was delivered on Monday; nothing to refund."


async def streamed_run(shop: Shop, server: FakeOpenAI, *script: Any, **agent: Any
                       ) -> tuple[Any, list[Any], list[Any]]:
    shop.agent(server, ["lookup"], stream=True, **agent)
    server.add(*script)
    runtime, run = await start(shop, agent_chain(), paused=True)
    seen: list[Any] = []
    plain: list[Any] = []
    run.subscribe(seen.append, deltas=True)
    run.subscribe(plain.append)
    await run.unpause()
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED, result
    await runtime.aclose()
    return run, seen, plain


async def test_text_and_argument_pieces_reach_a_deltas_subscriber_as_they_arrive(
        shop: Shop, server: FakeOpenAI) -> None:
    run, seen, plain = await streamed_run(
        shop, server, tool_calls(Call("lookup", {"order": 7}), content="Let me look that up."),
        ANSWER)
    pieces = [x for x in seen if x.kind == MODEL_DELTA]
    assert all(isinstance(p, ModelDelta) and p.run_id == run.run_id and p.step_id == "help"
               for p in pieces)
    first = [p for p in pieces if p.turn == 1]
    assert "".join(p.text for p in first if p.call_index is None) == "Let me look that up."
    assert "".join(p.arguments for p in first if p.call_index == 0) == '{"order": 7}'
    assert [p.function for p in first if p.function] == ["lookup"]
    assert len(first) > 4  # (in pieces: the server streams 7 characters at a time)
    assert "".join(p.text for p in pieces if p.turn == 2) == ANSWER
    # each turn's pieces come before the event that records it whole
    grown = next(i for i, x in enumerate(seen) if x.kind == EventKind.STEPS_ADDED)
    assert all(seen.index(p) < grown for p in first)
    ended = next(i for i, x in enumerate(seen) if x.kind == EventKind.STEP_SUCCEEDED
                 and x.step_id == "help")
    assert all(seen.index(p) < ended for p in pieces)
    # never stored, never handed to a subscriber that did not ask for them
    assert all(x.kind != MODEL_DELTA for x in plain)
    stored = run.runtime.store.load_events(run.run_id)
    assert all(e.kind != MODEL_DELTA for e in stored)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert [x for x in seen if x.kind != MODEL_DELTA] == plain
    assert run.state.steps["help"].output == ANSWER
    assert run.event_list()[-1].kind == EventKind.RUN_SUCCEEDED


async def test_a_prompt_step_streams_too(shop: Shop, server: FakeOpenAI) -> None:
    """An agent without tools (a prompt step): one turn, its text in pieces."""
    shop.agent(server, [], stream=True, name="prompt")
    server.add(Reply(ANSWER, gap_s=0.01))
    runtime, run = await start(shop, agent_chain(agent="prompt"), paused=True)
    seen: list[ModelDelta] = []
    run.subscribe(lambda x: seen.append(x) if x.kind == MODEL_DELTA else None, deltas=True)
    await run.unpause()
    assert (await run.wait()).ok
    await runtime.aclose()
    assert "".join(p.text for p in seen) == ANSWER and len(seen) == -(-len(ANSWER) // 7)
    assert {p.turn for p in seen} == {1}


async def test_an_agent_that_does_not_stream_tells_no_piece(shop: Shop,
                                                            server: FakeOpenAI) -> None:
    shop.agent(server, ["lookup"])
    server.add(ANSWER)
    runtime, run = await start(shop, agent_chain(), paused=True)
    seen: list[Any] = []
    run.subscribe(seen.append, deltas=True)
    await run.unpause()
    assert (await run.wait()).ok
    await runtime.aclose()
    assert seen and all(x.kind != MODEL_DELTA for x in seen)


async def test_a_subscriber_that_breaks_is_dropped_and_the_turn_goes_on(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server, ["lookup"], stream=True)
    server.add(ANSWER)
    runtime, run = await start(shop, agent_chain(), paused=True)

    def broken(x: Any) -> None:
        if x.kind == MODEL_DELTA:
            raise RuntimeError("the front end went away")

    run.subscribe(broken, deltas=True)
    await run.unpause()
    assert (await run.wait()).ok
    await runtime.aclose()
    assert run.state.steps["help"].output == ANSWER
