"""The typed record of an agent's turn (issue 44 item 2): the engine writes a turn's
``steps_added`` through :class:`TurnRecorded` and every reader reads it back through it; the
stored shape is the one every log written so far holds (version 1, no version key), and a
version this chainlab does not know is refused, never misread."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chainlab.agent.model import ModelCall, ModelTurn
from chainlab.agent.turns import CallMade, CallRefused, TurnRecorded, turns_of
from chainlab.errors import StoreError
from chainlab.events import EventKind
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, run_agent

pytestmark = pytest.mark.anyio

#: a turn's payload exactly as chainlab wrote it before the record was typed (main at
#: 0aa0fb9 and 7b54995, engine/attempt/agent.py): a call made, a call refused, the usage
WRITTEN_BEFORE: dict[str, Any] = {
    "kind": "agent", "turn": 1, "attempt": 1,
    "answer": {"content": "Let me look.", "calls": [
        {"id": "c1", "function": "lookup", "arguments": '{"order": 7}'},
        {"id": "c2", "function": "teleport", "arguments": "{}"}], "finish_reason": "tool_calls"},
    "ids": ["help/1.1"], "calls": [{"index": 0, "tool": "lookup", "args": {"order": 7}}],
    "refused": [{"index": 1, "error": "unknown tool 'teleport'"}],
    "usage": {"input_tokens": 10, "output_tokens": 5, "tokens": 15}}
#: ... and a final answer sent back (no call), in a fork, whose usage the server reported
#: wrongly (issue 44: recorded as unknown, the step's expected usage counted instead)
SENT_BACK_BEFORE: dict[str, Any] = {
    "kind": "agent", "turn": 2, "attempt": 3,
    "answer": {"content": "done", "calls": [], "finish_reason": "stop"},
    "ids": [], "calls": [], "refused": [], "feedback": "the answer is not JSON",
    "usage_unknown": "the server reported -5 input tokens",
    "usage": {"tokens": 15, "estimated_calls": 1},
    "confirm_first": {"help/1.1": {"fork": {"parent_run": "r0"}}}}


def test_a_turn_written_before_reads_back_typed_and_writes_the_same_payload() -> None:
    turn = TurnRecorded.from_dict(WRITTEN_BEFORE)
    assert turn == TurnRecorded(
        1, 1, ModelTurn("Let me look.", (ModelCall("c1", "lookup", '{"order": 7}'),
                                         ModelCall("c2", "teleport", "{}")),
                        "tool_calls", {"input_tokens": 10, "output_tokens": 5, "tokens": 15}),
        made=(CallMade("help/1.1", 0, "lookup", {"order": 7}),),
        refused=(CallRefused(1, "unknown tool 'teleport'"),),
        usage={"input_tokens": 10, "output_tokens": 5, "tokens": 15})
    assert turn.ids == ["help/1.1"] and not turn.fruitless
    # the stored shape is unchanged, key order included (the JSON text a store keeps)
    assert json.dumps(turn.to_dict()) == json.dumps(WRITTEN_BEFORE)
    back = TurnRecorded.from_dict(SENT_BACK_BEFORE)
    assert back.fruitless and back.feedback == "the answer is not JSON"
    assert back.answer.usage is None and back.answer.usage_unknown is not None
    assert back.usage == {"tokens": 15, "estimated_calls": 1} and back.confirm_first
    assert json.dumps(back.to_dict()) == json.dumps(SENT_BACK_BEFORE)


def test_a_turn_of_a_newer_record_version_is_refused_not_misread() -> None:
    newer = {**WRITTEN_BEFORE, "v": 2}
    with pytest.raises(StoreError, match=r"version 2 .*reads version 1; upgrade chainlab"):
        TurnRecorded.from_dict(newer)
    assert TurnRecorded.from_dict({**WRITTEN_BEFORE, "v": 1}) == \
        TurnRecorded.from_dict(WRITTEN_BEFORE)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_every_turn_the_engine_records_is_a_turn_record(shop: Shop,
                                                              server: FakeOpenAI) -> None:
    """A run with a turn of calls (one refused) and a final answer sent back: each
    ``steps_added`` payload is exactly what its typed record writes, and the readers see the
    same turns."""
    runtime, run, result = await run_agent(
        shop, server,
        tool_calls(Call("lookup", {"order": 7}), Call("teleport", {})),
        "not json at all", '{"done": true}',
        output_schema={"type": "object", "properties": {"done": {"type": "boolean"}},
                       "required": ["done"]})
    assert result.status == RunStatus.SUCCEEDED
    payloads = [e.payload for e in run.event_list() if e.kind == EventKind.STEPS_ADDED]
    assert len(payloads) == 2
    for payload in payloads:
        assert json.dumps(TurnRecorded.from_dict(payload).to_dict()) == json.dumps(payload)
    turns = turns_of(run.state, "help")
    assert [(t.turn, t.ids, len(t.refused), t.feedback is not None) for t in turns] == [
        (1, ["help/1.1"], 1, False), (2, [], 0, True)]
    await runtime.aclose()
