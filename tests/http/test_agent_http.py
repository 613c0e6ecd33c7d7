"""A run with an agent step over HTTP (issue 37 item 6): a real ``chainlab serve`` starts it,
its SSE stream carries each model turn (the ``steps_added`` of the agent step) and each
call's events, a call waiting for a person is approved by its step id (``help/1.2``), and
the model, a scripted OpenAI-compatible server asked through the real ``openai`` client, is
asked once per turn: never again for a turn the log holds, and the payment is made once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chainlab.http import Client
from chainlab.testing.openai_script import Call, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.http.server import Server, effects, wait_for

CHAIN = {"name": "help", "steps": [
    {"id": "help", "tool": "agent:support", "args": {"request": "{{ context.request }}"}}]}


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, model: FakeOpenAI) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("agent-served"),
                 extra_env={"SERVED_MODEL_URL": model.base_url}).start()
    yield srv
    srv.stop()
    assert "Traceback" not in srv.log(), srv.log()


def test_an_agent_run_starts_streams_and_is_approved_over_http(served: Server,
                                                               model: FakeOpenAI) -> None:
    model.add(tool_calls(Call("add", {"a": 2, "b": 3}), Call("pay", {"to": "ann",
                                                                     "amount": 5})),
              "Paid ann 5.")
    with served.client() as api:
        _run(api, served.cwd, model)


def _run(api: Client, cwd: Path, model: FakeOpenAI) -> None:
    view = api.start(CHAIN, {"request": "pay ann what 2 + 3 makes"}, wait=True)
    run_id = view["run_id"]
    assert view["status"] == "suspended"
    assert [w["step_id"] for w in api.confirmations(run_id)] == ["help/1.2"]
    assert view["steps"]["help/1.1"]["output"] == 5  # its sibling ran meanwhile
    api.approve(run_id, "help/1.2", by="alice")  # a call's step id, slash and all
    wait_for(lambda: api.get(run_id)["status"] == "succeeded", what="the run's end")
    events = list(api.stream(run_id))  # stored, then live, up to the end event
    grown = [e for e in events if e.event == "steps_added"]
    assert len(grown) == 1 and grown[0].data["step_id"] == "help"
    assert grown[0].data["payload"]["ids"] == ["help/1.1", "help/1.2"]
    started = [e.data["payload"]["turn"] for e in events
               if e.event == "step_started" and e.data["step_id"] == "help"]
    assert started == [1, 2]  # each model turn is an attempt of the agent step
    assert any(e.event == "step_approved" and e.data["step_id"] == "help/1.2" for e in events)
    assert events[-1].event == "end"
    final = api.get(run_id)
    assert final["outputs"]["help"] == "Paid ann 5."
    assert [(t["turn"], t["final"]) for t in final["steps"]["help"]["turns"]] == [
        (1, False), (2, True)]
    assert len(model.completions) == 2  # once per turn
    paid = [e for e in effects(cwd) if e["run_id"] == run_id and e["kind"] == "pay"]
    assert [(e["step_id"], e["to"], e["amount"]) for e in paid] == [("help/1.2", "ann", 5)]


def test_a_streamed_answer_reaches_the_sse_stream_as_delta_events(served: Server,
                                                                   model: FakeOpenAI) -> None:
    """``event: delta`` on the run's stream, piece by piece, before the turn's event; never
    stored, so a stream opened after the run ended replays none."""
    text = "Dear Ann, here is what you are owed: five, as 2 + 3 makes."
    model.add(Reply(text, delay_s=1.0, gap_s=0.02))  # (the stream opens before the model
    chain = {"name": "write", "steps": [  # answers)
        {"id": "w", "tool": "agent:writer", "args": {"request": "write to ann"}}]}
    with served.client() as api:
        run_id = api.start(chain, {})["run_id"]
        events = list(api.stream(run_id))
        pieces = [e for e in events if e.event == "delta"]
        assert "".join(p.data["text"] for p in pieces) == text
        assert len(pieces) == -(-len(text) // 7)
        assert {(p.data["kind"], p.data["run_id"], p.data["step_id"], p.data["turn"])
                for p in pieces} == {("model_delta", run_id, "w", 1)}
        done = next(i for i, e in enumerate(events) if e.event == "step_succeeded")
        assert events.index(pieces[-1]) < done
        assert events[done].data["payload"]["output"] == text
        again = list(api.stream(run_id))  # after the end: the stored log, no delta
        assert [e.event for e in again if e.event == "delta"] == []
        assert [e.seq for e in again if e.seq] == [e.seq for e in events if e.seq]
