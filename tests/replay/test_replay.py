"""Replay (issue 31): a recorded run replays from its attempts with no tool called: the same
statuses, outputs, confirmation points and usage, through retries, an approval, an in_doubt
resolution and a compensation; a changed call fails its step with a diff of the args."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import ReplayError
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import ManualClock
from chainlab.testing.replay import Recording, replay, replay_run

from . import replay_tools
from .replay_tools import CALLS, CHAIN, SMALL, toolbox

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _here(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    CALLS.clear()


async def record_everything() -> tuple[MemoryStore, str]:
    """The CHAIN run as a person would: approve charge, resolve notify (it took effect)."""
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(CHAIN, {"query": "sales"})
        assert (await run.wait()).status == "suspended"
        await run.approve("charge", note="fine")
        assert (await run.wait()).status == "suspended"
        assert run.waiting() == {"notify": "in_doubt"}
        await run.resolve("notify", output="sent")
        result = await run.wait()
    assert result.status == "rolled_back"
    return store, run.run_id


async def test_a_run_with_everything_replays_with_no_tool_called() -> None:
    store, run_id = await record_everything()
    recorded = Recording.from_store(store, run_id)
    assert CALLS == {"fetch": 2, "summarize": 1, "charge": 1, "notify": 1, "verify": 1,
                     "refund": 1}
    assert recorded.expected["steps"] == {
        "fetch": {"status": "succeeded", "output": {"query": "sales", "rows": [3, 1, 2]}},
        "summarize": {"status": "succeeded", "output": "3 rows, largest 3"},
        "charge": {"status": "compensated", "output": {"charge_id": "ch-5", "amount": 5}},
        "notify": {"status": "succeeded", "output": "sent"},
        "verify": {"status": "failed", "output": None}}
    assert recorded.expected["confirmations"] == ["charge"]
    assert [d["action"] for d in recorded.decisions] == ["approve", "resolve"]
    CALLS.clear()
    effects = Path("effects.jsonl").read_text()
    replayed = await replay_run(recorded, toolbox)
    replayed.assert_same()
    assert CALLS == {}  # no tool was called
    assert Path("effects.jsonl").read_text() == effects  # and nothing happened in the world
    steps = replayed.state.steps
    assert steps["fetch"].attempts == 2  # the flaky failure replayed as a failure, then ok
    assert [a.error for a in replayed.state.attempts if a.step_id == "fetch"] == [
        "503 from upstream", None]
    assert steps["notify"].decided["action"] == "resolved (it took effect)"
    assert [a.kind for a in replayed.state.attempts if a.step_id == "charge"] == [
        "call", "compensation"]
    assert replayed.state.usage == recorded.expected["usage"] == {
        "input_tokens": 120, "output_tokens": 30, "tokens": 150, "cost": 0.0045,
        "models": ["tiny-model"]}
    assert replayed.unused == [] and replayed.decisions_left == []


async def test_the_fixture_round_trips_as_json() -> None:
    store, run_id = await record_everything()
    recorded = Recording.from_store(store, run_id)
    path = recorded.save("fixture.json")
    again = Recording.load(path)
    assert again == recorded
    assert json.loads(path.read_text())["format"] == 1
    (await replay_run(again, toolbox)).assert_same()


async def test_replay_returns_a_toolbox_and_a_live_tool_is_really_called() -> None:
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(SMALL, {"query": "q"})
        await run.wait()
        await run.approve("charge")
        assert (await run.wait()).status == "succeeded"
    tools = replay(run.run_id, store=store, toolbox=toolbox, live=["summarize"])
    assert isinstance(tools, Toolbox) and tools.names() == toolbox.names()
    assert tools.get("charge").side_effects and tools.get("charge").requires_confirmation
    CALLS.clear()
    replayed = await replay_run(run.run_id, toolbox, store=store, live=["summarize"])
    replayed.assert_same()
    assert CALLS == {"summarize": 1}


async def test_a_changed_tool_fails_the_step_with_a_diff_of_its_args() -> None:
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(SMALL, {"query": "q"})
        await run.wait()
        await run.approve("charge")
        await run.wait()
    recorded = Recording.from_store(store, run.run_id)
    changed = Toolbox("changed")
    for tool in toolbox:
        if tool.name != "fetch":
            changed.add(tool)

    @changed.tool(name="fetch")
    def fetch(query: str) -> dict[str, Any]:  # a "fix" that changes behaviour
        return {"query": query, "rows": [3, 1, 2, 7]}

    replayed = await replay_run(recorded, changed, live=["fetch"])
    diff = replayed.differences()
    assert '-summarize: succeeded "3 rows, largest 3"\n' in diff
    assert '+fetch: succeeded {"query":"q","rows":[3,1,2,7]}\n' in diff
    assert "step 'summarize' failed: replay: step 'summarize' (tool 'summarize') was called " \
           "with args the recording never saw:" in diff
    assert "--- recorded args\n+++ args now\n@@ -1 +1 @@\n-rows: [3,1,2]\n+rows: [3,1,2,7]" \
        in diff
    with pytest.raises(AssertionError, match="differs from the recording"):
        replayed.assert_same()


async def test_a_recorded_fork_replays_from_its_seed() -> None:
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(SMALL, {"query": "q"})
        await run.wait()
        await run.reject("charge", "not now")
        assert (await run.wait()).status == "failed"
        fork = await runtime.fork(run.run_id, args={"charge": {"amount": 7}})
        await fork.wait()
        await fork.approve("charge")
        assert (await fork.wait()).status == "succeeded"
    recorded = Recording.from_store(store, fork.run_id)
    assert [e["kind"] for e in recorded.seed] == ["run_started", "run_forked",
                                                  "step_reused", "step_reused"]
    assert [c.step_id for c in recorded.calls] == ["charge"]
    CALLS.clear()
    replayed = await replay_run(recorded, toolbox)
    replayed.assert_same()
    assert CALLS == {}
    assert replayed.state.steps["fetch"].reused["source_run"] == run.run_id
    assert replayed.state.steps["charge"].output == {"charge_id": "ch-7", "amount": 7}


async def test_a_rollback_a_person_asked_for_replays_too() -> None:
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(SMALL, {"query": "q"})
        await run.wait()
        await run.approve("charge")
        assert (await run.wait()).status == "succeeded"
        await run.rollback()
        assert (await run.wait()).status == "rolled_back"
    recorded = Recording.from_store(store, run.run_id)
    assert [d["action"] for d in recorded.decisions] == ["approve", "rollback"]
    CALLS.clear()
    replayed = await replay_run(recorded, toolbox)
    replayed.assert_same()
    assert CALLS == {} and replayed.state.steps["charge"].status == "compensated"


async def test_a_chain_that_no_longer_validates_is_a_clear_error() -> None:
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(SMALL, {"query": "q"})
        await run.wait()
        await run.approve("charge")
        await run.wait()
    recorded = Recording.from_store(store, run.run_id)
    fewer = Toolbox("fewer")
    for tool in toolbox:
        if tool.name != "summarize":
            fewer.add(tool)
    with pytest.raises(ReplayError, match="called \\['summarize'\\], which toolbox 'fewer' "
                                          "no longer has"):
        await replay_run(recorded, fewer)
    broken = Recording(**{**recorded.__dict__, "chain": {
        **recorded.chain, "steps": [*recorded.chain["steps"],
                                    {"id": "x", "tool": "fetch", "depends_on": ["nope"]}]}})
    with pytest.raises(ReplayError, match="no longer validates against toolbox") as info:
        await replay_run(broken, toolbox)
    assert "nope" in str(info.value)


async def test_bad_input_is_a_clear_error(tmp_path: Any) -> None:
    store = MemoryStore()
    with pytest.raises(Exception, match="nope"):
        Recording.from_store(store, "nope")
    with pytest.raises(ReplayError, match="no replay fixture at"):
        Recording.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    with pytest.raises(ReplayError, match="is not a chainlab replay fixture"):
        Recording.load(tmp_path / "bad.json")
    with pytest.raises(ReplayError, match="needs the toolbox"):
        replay(Recording.from_dict(json.loads(json.dumps(_tiny()))))


async def test_a_run_whose_output_is_not_json_cannot_be_exported() -> None:
    from chainlab.events import Event, EventKind
    from chainlab.store.base import RunRecord

    store = MemoryStore()
    record = RunRecord(run_id="r-1", chain_name="c", status="succeeded", epoch=1,
                       created_at=1.0, updated_at=1.0, chain={"name": "c", "steps": [
                           {"id": "a", "tool": "fetch"}]})
    store.create_run(record)
    store.append("r-1", 1, [
        Event("r-1", 1, 1.0, 1, EventKind.RUN_STARTED),
        Event("r-1", 2, 1.0, 1, EventKind.STEP_READY, "a"),
        Event("r-1", 3, 1.0, 1, EventKind.STEP_STARTED, "a", 1, {"args": {}, "tool": "fetch"}),
        Event("r-1", 4, 1.0, 1, EventKind.STEP_SUCCEEDED, "a", 1, {"output": object()}),
        Event("r-1", 5, 1.0, 1, EventKind.RUN_SUCCEEDED)])
    await store.flush("r-1", 1)
    with pytest.raises(ReplayError, match="step 'a': its recorded output is not JSON data"):
        Recording.from_store(store, "r-1")


def _tiny() -> dict[str, Any]:
    return {"format": 1, "run_id": "r", "chain": Chain.from_dict({"name": "t", "steps": [
        {"id": "a", "tool": "fetch"}]}).to_dict(), "context": {}, "options": {}, "calls": [],
        "decisions": [], "expected": {}}


def test_the_tools_module_is_importable_by_name() -> None:
    assert replay_tools.toolbox is toolbox


async def test_a_run_with_a_sub_chain_replays() -> None:
    inner = Chain.from_dict({"name": "inner", "steps": [
        {"id": "f", "tool": "fetch", "args": {"query": "{{ context.q }}"}},
        {"id": "s", "tool": "summarize", "args": {"rows": "{{ steps.f.output.rows }}"}}]})
    outer = Chain.from_dict({"name": "outer", "steps": [
        {"id": "sub", "tool": "chain:inner", "args": {"q": "{{ context.query }}"}},
        {"id": "charge", "tool": "charge", "args": {"amount": 1}, "depends_on": ["sub"]}]})
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock(), chains={"inner": inner}) as rt:
        run = await rt.start(outer, {"query": "nested"})
        await run.wait()
        await run.approve("charge")
        assert (await run.wait()).status == "succeeded"
    recorded = Recording.from_store(store, run.run_id)
    assert {c.step_id for c in recorded.calls} == {"sub/f", "sub/s", "charge"}
    CALLS.clear()
    replayed = await replay_run(recorded, toolbox)
    replayed.assert_same()
    assert CALLS == {}
    assert replayed.state.steps["sub"].output == run.steps["sub"].output


async def test_a_run_that_grew_replays_instance_by_instance() -> None:
    """A for_each step (DESIGN §17) replays as it ran: the same instances (its list comes
    from the recorded output it reads), each answered from its own recorded call, each
    approval re-applied to its own instance, no tool called."""
    from chainlab.events import EventKind

    tb = Toolbox("fan")
    called: list[str] = []

    @tb.tool
    def split(text: str) -> list[str]:
        called.append("split")
        return text.split(",")

    @tb.tool(side_effects=True, requires_confirmation=True)
    def send(to: str) -> str:
        called.append(to)
        return f"sent {to}"

    chain = Chain.from_dict({"name": "fan", "steps": [
        {"id": "split", "tool": "split", "args": {"text": "{{ context.who }}"}},
        {"id": "each", "tool": "send", "for_each": "{{ steps.split.output }}",
         "args": {"to": "{{ item }}"}}]})
    store = MemoryStore()
    async with Runtime(tb, store, clock=ManualClock()) as runtime:
        run = await runtime.start(chain, {"who": "ann,bo,cy"})
        await run.wait()
        await run.approve("each[1]")
        await run.wait()
        await run.approve_all("each")
        assert (await run.wait()).status == "succeeded"
    assert called == ["split", "bo", "ann", "cy"]
    recorded = Recording.from_store(store, run.run_id)
    called.clear()
    replayed = await replay_run(recorded, tb)
    replayed.assert_same()
    assert called == []
    grown = [e for e in replayed.run.event_list() if e.kind == EventKind.STEPS_ADDED]
    assert grown[0].payload["ids"] == ["each[0]", "each[1]", "each[2]"]
    assert replayed.run.state.steps["each"].output == ["sent ann", "sent bo", "sent cy"]
