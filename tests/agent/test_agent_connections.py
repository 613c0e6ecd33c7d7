"""One ``openai`` client per endpoint and event loop (issue 49 item 1): every turn of a run
reuses one connection to the model endpoint, counted at the scripted server (the connections
it accepted), and the runtime's ``aclose`` closes it; the next turn after that opens one
again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from chainlab.agent.openai import _KEPT, close_clients
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, start

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A server that keeps connections alive, as a real one does."""
    with FakeOpenAI(keep_alive=True) as fake:
        yield fake

TURNS = 12


def script(turns: int) -> list[object]:
    return [*(tool_calls(Call("lookup", {"order": n})) for n in range(1, turns)),
            "all looked up"]


@pytest.mark.parametrize("stream", [False, True])
async def test_every_turn_of_a_run_reuses_one_connection(shop: Shop, server: FakeOpenAI,
                                                         stream: bool) -> None:
    shop.agent(server, ["lookup"], max_turns=TURNS + 1, stream=stream)
    server.add(*script(TURNS))
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert len(server.completions) == TURNS
    assert server.connections == 1  # (a client per turn opened TURNS of them)
    # a second run on the same runtime, same endpoint: still the same connection
    server.add(*script(3))
    again = await runtime.start(agent_chain())
    assert (await again.wait()).status == RunStatus.SUCCEEDED
    assert server.connections == 1
    await runtime.aclose()  # closes the kept client ...
    assert not _KEPT.get(asyncio.get_running_loop())
    server.add(*script(2))  # ... and a later run opens a new one, then reuses it
    third = await runtime.start(agent_chain())
    assert (await third.wait()).status == RunStatus.SUCCEEDED
    assert server.connections == 2
    await runtime.aclose()


async def test_two_agents_on_one_endpoint_share_its_client(shop: Shop,
                                                           server: FakeOpenAI) -> None:
    shop.agent(server, ["lookup"], name="support")
    shop.agent(server, ["lookup"], name="other")
    server.add(*script(2), *script(2))
    runtime, run = await start(shop, agent_chain())
    other = await runtime.start(agent_chain(agent="other"))
    assert (await run.wait()).status == (await other.wait()).status == RunStatus.SUCCEEDED
    assert server.connections <= 2  # (two turns may be in flight at once: two connections)
    assert await close_clients() == 1  # one client for the endpoint, whatever the agents
    await runtime.aclose()
