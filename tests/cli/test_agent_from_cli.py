"""``chainlab agent --from MODULE:OBJ "REQUEST"`` (issue 45): the agent of a module, written
with Pydantic AI or the OpenAI Agents SDK (converted) or as a chainlab Agent, asked one
request. The run keeps MODULE:OBJ (never the object, never a key), so ``chainlab approve`` in
another process imports it again and finishes the run without asking the model again for the
recorded turn. Real subprocesses, the SDKs' OpenAI model classes over the real ``openai``
client to a scripted server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .helpers import chainlab, write

COMMON = '''
import os

URL = os.environ["SHOP_MODEL_URL"]


def lookup_order(order_id: int) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "status": "damaged", "total": 40}


def refund(order_id: int, amount: int) -> dict:
    """Refund part of an order."""
    with open("refunds.txt", "a") as f:
        f.write(f"{order_id}:{amount}\\n")
    return {"order_id": order_id, "refunded": amount}
'''

PYDANTIC_AI = COMMON + '''
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from chainlab.integrations.pydantic_ai import from_pydantic_ai

support = PydanticAgent(OpenAIChatModel("fake-model", provider=OpenAIProvider(
    base_url=URL, api_key="test")), name="support", instructions="You help customers.")
support.tool_plain(lookup_order)
support.tool_plain(requires_approval=True)(refund)
described = from_pydantic_ai(support, name="described",
                             tools={"lookup_order": {"side_effects": False}})
not_an_agent = 42

from chainlab import Toolbox

empty = Toolbox("empty")  # (a worker's --tools: the agents bring theirs)
'''

AGENTS_SDK = COMMON + '''
from agents import Agent as SDKAgent, OpenAIChatCompletionsModel, function_tool
from agents import set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)
support = SDKAgent(name="Support agent", instructions="You help customers.",
                   model=OpenAIChatCompletionsModel("fake-model", AsyncOpenAI(
                       base_url=URL, api_key="test", max_retries=0)),
                   tools=[function_tool(lookup_order), function_tool(refund, needs_approval=True)])
'''


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    write(tmp_path / "pa_agents.py", PYDANTIC_AI)
    write(tmp_path / "sdk_agents.py", AGENTS_SDK)
    return tmp_path


@pytest.mark.parametrize("ref,name", [("pa_agents:support", "support"),
                                      ("sdk_agents:support", "support_agent"),
                                      ("pa_agents:described", "described")])
def test_an_agent_from_a_module_waits_and_is_approved_in_another_process(
        shop: Path, ref: str, name: str) -> None:
    db = str(shop / "runs.db")
    script = [tool_calls(Call("lookup_order", {"order_id": 7}, "c1"),
                         Call("refund", {"order_id": 7, "amount": 15}, "c2")),
              "Refunded 15 on order 7."]
    with FakeOpenAI(script) as server:
        env = {"PYTHONPATH": str(shop), "SHOP_MODEL_URL": server.base_url}
        r = chainlab("agent", "--from", ref, "order 7 arrived broken, refund 15", "--db", db,
                     "--json", cwd=shop, **env)  # no --tools: the agent brings its tools
        assert r.code == 3, r.err  # the refund waits for a person
        view = r.json
        assert view["chain"] == f"agent-{name}"
        assert [w["step_id"] for w in view["waiting"]] == [f"{name}/1.2"]
        assert view["steps"][f"{name}/1.1"]["status"] == "succeeded"
        assert not (shop / "refunds.txt").exists()
        meta = json.loads(sqlite3.connect(db).execute(
            "SELECT meta FROM runs WHERE run_id = ?", (view["run_id"],)).fetchone()[0])
        assert meta["agent_from"] == ref and meta["tools"] == ""
        # another process, which has only the run id: it imports MODULE:OBJ again
        r = chainlab("approve", view["run_id"], f"{name}/1.2", "--db", db, cwd=shop, **env)
        assert r.code == 0, r.err
        assert len(server.completions) == 2  # turn 1 answered from the record
    assert (shop / "refunds.txt").read_text() == "7:15\n"
    r = chainlab("show", view["run_id"], "--db", db, "--json", cwd=shop,
                 PYTHONPATH=str(shop), SHOP_MODEL_URL="http://127.0.0.1:9/v1")
    assert r.json["status"] == "succeeded"
    assert r.json["outputs"][name] == "Refunded 15 on order 7."
    tools = {s: st.get("tool") for s, st in r.json["steps"].items()}
    assert r.json["steps"][f"{name}/1.2"]["status"] == "succeeded", tools


@pytest.mark.parametrize(("argv", "says"), [
    (["--from", "pa_agents:not_an_agent", "hi"], "not an agent chainlab can run"),
    (["--from", "no_such_module:x", "hi", "--model", "m"],
     "--model and --from do not go together"),
])
def test_a_bad_from_is_a_usage_error(shop: Path, argv: list[str], says: str) -> None:
    r = chainlab("agent", *argv, "--db", str(shop / "runs.db"), cwd=shop, PYTHONPATH=str(shop),
                 SHOP_MODEL_URL="http://127.0.0.1:9/v1")
    assert r.code == 2, (r.out, r.err)
    assert says in r.err, r.err
    assert not (shop / "runs.db").exists()  # refused before anything was stored


def test_an_agent_from_a_module_enqueued_is_run_by_a_worker(shop: Path) -> None:
    """``chainlab agent --from MODULE:OBJ --enqueue``: a worker (another process) claims the
    run, imports the agent from the run's MODULE:OBJ, asks the model; the refund waits;
    ``chainlab approve`` records the decision, the worker applies it; one request a turn."""
    from chainlab.store import SQLiteStore

    from .helpers import until_status, worker

    db = str(shop / "q.db")
    SQLiteStore(db).close()  # (a worker's database: an enqueue is refused without one)
    script = [tool_calls(Call("lookup_order", {"order_id": 7}, "c1"),
                         Call("refund", {"order_id": 7, "amount": 15}, "c2")),
              "Refunded 15 on order 7."]
    with FakeOpenAI(script) as server:
        extra = {"PYTHONPATH": str(shop), "SHOP_MODEL_URL": server.base_url}
        r = chainlab("agent", "--from", "pa_agents:support", "refund 15 on order 7", "--db", db,
                     "--enqueue", cwd=shop, **extra)
        assert r.code == 0, r.err
        run_id = r.out.strip()
        assert server.completions == []  # nothing asked here
        with worker("pa_agents:empty", db, cwd=shop, **extra) as proc:
            until_status(db, run_id, "suspended", proc)  # the refund waits
            assert len(server.completions) == 1
            r = chainlab("approve", run_id, "support/1.2", "--db", db, cwd=shop, **extra)
            assert r.code == 0, r.err
            until_status(db, run_id, "succeeded", proc)
        assert len(server.completions) == 2  # once per turn
    assert (shop / "refunds.txt").read_text() == "7:15\n"
