"""Replay and ``export-test`` of a run with an agent step (issue 37 item 5): the model's
turns answer from the recording (a cassette), so the exported test needs no model server and
no network; a changed tool output or changed instructions fail it with a readable diff of
the recorded request against the one made now."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from chainlab import Chain
from chainlab.agent.adhoc import agent_request
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.export import export_test
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from chainlab.testing.replay import Recording, replay_run
from tests.replay.test_export import pytest_in

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("export-test")]

TOOLS = '''
import json, os, pathlib
from chainlab import Agent, Toolbox

toolbox = Toolbox("support_shop")


@toolbox.tool
def lookup(order: int) -> dict:
    """Find an order."""
    return {"order": order, "status": "delivered"}


@toolbox.tool(side_effects=True, requires_confirmation=True)
def refund(order: int, amount: int) -> dict:
    """Refund an order."""
    with pathlib.Path("effects.jsonl").open("a") as fh:
        fh.write(json.dumps({"refund": amount}) + "\\n")
    return {"refunded": amount}


# the model answers only while the test records (nothing listens there afterwards)
toolbox.add_agent(Agent("support", "You help customers with their orders.",
                        ["lookup", "refund"], model="fake-model", api_key="test",
                        base_url=os.environ.get("SHOP_MODEL_URL", "http://127.0.0.1:9/v1")))
'''

CHAIN = Chain.from_dict({"name": "support", "steps": [
    {"id": "help", "tool": "agent:support", "args": {"request": "{{ context.ask }}"}}]})

SCRIPT = [tool_calls(Call("lookup", {"order": 7}, "c1"),
                     Call("refund", {"order": 7, "amount": 50}, "c2")),
          Call("refund", {"order": 7, "amount": 15}, "c3"),
          "Refunded 15 on order 7 (50 was refused)."]


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, Path]]:
    (tmp_path / "support_shop.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with FakeOpenAI(SCRIPT) as server:
        monkeypatch.setenv("SHOP_MODEL_URL", server.base_url)
        sys.modules.pop("support_shop", None)
        module = importlib.import_module("support_shop")
        yield module, tmp_path
    sys.modules.pop("support_shop", None)


async def record(module: ModuleType, db: Path) -> str:
    runtime = Runtime(module.toolbox, SQLiteStore(db))
    run = await runtime.start(CHAIN, {"ask": "order 7 arrived broken, refund 50"})
    await run.wait()
    await run.reject("help/1.2", "50 is more than the order's total")
    await run.wait()
    await run.approve("help/2.1")
    result = await run.wait()
    assert result.ok, result
    await runtime.aclose()
    return run.run_id


async def recording_of(module: ModuleType, tmp_path: Path) -> Recording:
    """A run of the chain recorded in ``runs.db`` (refund rejected, then approved)."""
    run_id = await record(module, tmp_path / "runs.db")
    with SQLiteStore(tmp_path / "runs.db") as store:
        return Recording.from_store(store, run_id)


async def test_a_replay_answers_the_model_from_the_recording(
        shop: tuple[ModuleType, Path]) -> None:
    module, tmp_path = shop
    recording = await recording_of(module, tmp_path)
    assert [(t["step_id"], t["turn"]) for t in recording.turns] == [
        ("help", 1), ("help", 2), ("help", 3)]
    assert "agent:support" not in recording.tools_used()  # turns are not tool calls
    effects = (tmp_path / "effects.jsonl").read_text()
    replayed = await replay_run(recording, module.toolbox)
    replayed.assert_same()
    assert (tmp_path / "effects.jsonl").read_text() == effects  # refund was not called
    assert replayed.run.steps["help"].output == "Refunded 15 on order 7 (50 was refused)."


async def test_a_changed_tool_output_fails_the_replay_with_the_requests_diff(
        shop: tuple[ModuleType, Path]) -> None:
    module, tmp_path = shop
    recording = await recording_of(module, tmp_path)
    lookup = module.toolbox.get("lookup")
    lookup.fn = lambda order: {"order": order, "status": "lost"}
    replayed = await replay_run(recording, module.toolbox, live=["lookup"])
    with pytest.raises(AssertionError) as info:
        replayed.assert_same()
    text = str(info.value)
    assert "turn 2 of agent step 'help' asks the model something the recording never " \
        "asked" in text
    assert '-tool[c1]: {"order":7,"status":"delivered"}' in text
    assert '+tool[c1]: {"order":7,"status":"lost"}' in text


def test_the_exported_test_needs_no_model_and_fails_with_a_diff_after_a_change(
        shop: tuple[ModuleType, Path]) -> None:
    module, tmp_path = shop
    run_id = anyio.run(record, module, tmp_path / "runs.db")
    with SQLiteStore(tmp_path / "runs.db") as store:
        exported = export_test(store, run_id, tmp_path / "tests" / "test_support.py",
                               tools="support_shop:toolbox", toolbox=module.toolbox)
    assert exported.live == ["lookup"]
    fixture = json.loads(exported.fixture.read_text())
    assert [t["turn"] for t in fixture["turns"]] == [1, 2, 3]
    assert fixture["expected"]["confirmations"] == ["help/1.2", "help/2.1"]
    effects = (tmp_path / "effects.jsonl").read_text()

    ok = pytest_in(tmp_path, exported.test)  # no SHOP_MODEL_URL: nothing would answer
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (tmp_path / "effects.jsonl").read_text() == effects

    tools = (tmp_path / "support_shop.py").read_text()
    (tmp_path / "support_shop.py").write_text(
        tools.replace("You help customers with their orders.", "You are a pirate."))
    bad = pytest_in(tmp_path, exported.test)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "turn 1 of agent step 'help' asks the model something the recording never" \
        in bad.stdout
    assert "-system: You help customers with their orders." in bad.stdout
    assert "+system: You are a pirate." in bad.stdout
    (tmp_path / "support_shop.py").write_text(tools)
    assert pytest_in(tmp_path, exported.test).returncode == 0


def test_an_ad_hoc_agents_run_exports_a_test_that_needs_no_model(
        shop: tuple[ModuleType, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """An ad-hoc agent (``chainlab agent "REQUEST"``) is in no toolbox module: the fixture
    keeps its definition (never a key), and the exported test replays its turns from the
    recording with its model's server gone."""
    module, tmp_path = shop
    monkeypatch.setenv("OPENAI_API_KEY", "test")

    async def record_adhoc(base_url: str) -> str:
        asked = agent_request(module.toolbox, None, "order 7 arrived broken, refund 50",
                              model="fake-model", base_url=base_url)
        runtime = Runtime(module.toolbox, SQLiteStore(tmp_path / "adhoc.db"))
        run = await runtime.start(asked.chain, asked.context, meta=asked.meta)
        await run.wait()
        await run.reject("assistant/1.2", "50 is more than the order's total")
        await run.wait()
        await run.approve("assistant/2.1")
        assert (await run.wait()).ok
        await runtime.aclose()
        return run.run_id

    with FakeOpenAI(SCRIPT) as own:
        run_id = anyio.run(record_adhoc, own.base_url)
        assert len(own.completions) == 3
    with SQLiteStore(tmp_path / "adhoc.db") as store:
        exported = export_test(store, run_id, tmp_path / "tests" / "test_adhoc.py",
                               tools="support_shop:toolbox", toolbox=module.toolbox)
    fixture = json.loads(exported.fixture.read_text())
    assert fixture["meta"]["adhoc_agent"]["name"] == "assistant"
    assert "test" not in json.dumps(fixture["meta"])  # the key is not kept
    assert [t["turn"] for t in fixture["turns"]] == [1, 2, 3]
    ok = pytest_in(tmp_path, exported.test)  # its server is gone: nothing would answer
    assert ok.returncode == 0, ok.stdout + ok.stderr
