"""A turn stores what it adds (issue 49 item 1): a turn's ``step_started`` keeps the request's
hash, and its frame (instructions, tools, schema) only when it changed; the request is
rebuilt from the log by ONE function (:func:`chainlab.agent.turns.turn_requests`), and hashes
to what was recorded. A 100-turn run whose tool returns 2 KB stores at most 1.5x its new
content (counted in the SQLite store's rows)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from chainlab.agent.model import RequestHasher, request_hash
from chainlab.agent.turns import turn_requests
from chainlab.events import RunState
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, run_agent

pytestmark = pytest.mark.anyio


def rebuilt(run_id: str, store: object) -> list[tuple[int, dict[str, object], dict]]:
    events = store.load_events(run_id)  # type: ignore[attr-defined]
    state = RunState.from_events(run_id, events)
    return [(ev.payload["turn"], ev.payload, body) for ev, body in turn_requests(state, events)]


async def test_each_turn_keeps_its_hash_and_the_request_is_rebuilt_from_the_log(
        shop: Shop, server: FakeOpenAI) -> None:
    """Calls, a call refused (unknown tool), a failed call, a final answer that does not fit
    (sent back): every rebuilt request is the one the server received, and hashes to the
    recorded hash; the frame is recorded once."""
    _, run, result = await run_agent(
        shop, server,
        tool_calls(Call("lookup", {"order": 7}), Call("teleport", {})),
        Call("broken", {"order": 7}),
        "not json",
        '{"answer": "order 7 is archived"}',
        output_schema={"type": "object", "properties": {"answer": {"type": "string"}},
                       "required": ["answer"]})
    assert result.status == RunStatus.SUCCEEDED, result
    turns = rebuilt(run.run_id, run.runtime.store)
    assert [turn for turn, _, _ in turns] == [1, 2, 3, 4]
    for (turn, started, body), sent in zip(turns, server.completions, strict=True):
        assert "request" not in started
        assert request_hash(body) == started["request_hash"], turn
        assert body["messages"][1:] == sent.messages[1:]  # (the system prompt gets the
        assert body["tools"] == sent.body["tools"]  # schema added by the client's mode)
    assert [("frame" in started) for _, started, _ in turns] == [True, False, False, False]


async def test_a_hundred_turns_store_at_most_one_and_a_half_times_what_they_add(
        tmp_path: Path, shop: Shop, server: FakeOpenAI) -> None:
    page = "x" * 2048

    @shop.toolbox.tool
    def fetch(n: int) -> str:
        """A page of 2 KB."""
        return page

    turns = 100
    shop.agent(server, ["fetch"], max_turns=turns + 1)
    server.add(*(tool_calls(Call("fetch", {"n": n}), content=f"page {n} next")
                 for n in range(1, turns)), "read them all")
    store = SQLiteStore(tmp_path / "runs.db")
    runtime = Runtime(shop.toolbox, store)
    run = await runtime.start(agent_chain())
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await runtime.aclose()
    store.close()
    # what the turns add, each counted once: the tool outputs (as JSON), the answers, the
    # calls' arguments
    new = sum(len(json.dumps(page)) + len(f"page {n} next") + len(json.dumps({"n": n}))
              for n in range(1, turns)) + len("read them all")
    with sqlite3.connect(tmp_path / "runs.db") as db:
        stored = db.execute("SELECT sum(length(payload)) FROM events").fetchone()[0]
    print(f"stored {stored:,} bytes for {new:,} new: {stored / new:.2f}x")
    assert stored <= 1.5 * new, (stored, new, stored / new)
    # (the request of every turn is still there to be had, rebuilt)
    with SQLiteStore(tmp_path / "runs.db") as again:
        requests = rebuilt(run.run_id, again)
    assert len(requests) == turns
    assert all(request_hash(body) == started["request_hash"] for _, started, body in requests)
    assert len(requests[-1][2]["messages"]) == 2 + 2 * (turns - 1)



@pytest.mark.parametrize("extra", [{}, {"tools": [{"type": "function"}]},
                                   {"max_tokens": 5, "temperature": 0.2,
                                    "output_schema": {"b": {"z": 1, "a": 2}}}])
def test_the_request_hasher_gives_request_hash_turn_after_turn(extra: dict) -> None:
    """Hashing only what a turn adds gives the same value as hashing the whole request, and a
    request that does not continue the last one (an earlier result changed, fewer messages,
    another frame) is hashed whole."""
    hasher = RequestHasher()
    said = [{"role": "system", "content": "s"}, {"role": "user", "content": "é ü"}]
    for n in range(6):
        said = [*said, {"role": "assistant", "content": "x" * n,
                        "tool_calls": [{"id": str(n)}]}, {"role": "tool", "content": "y"}]
        body = {"messages": said, **extra}
        assert hasher.hash(body) == request_hash(body)
    changed = [*said[:3], {"role": "tool", "content": "changed"}, *said[4:]]
    for body in ({"messages": changed, **extra}, {"messages": said[:2], **extra},
                 {"messages": said, "temperature": 0.9}):
        assert hasher.hash(body) == request_hash(body)
