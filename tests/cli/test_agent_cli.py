"""``chainlab agent NAME "REQUEST"`` (issue 37 item 6): one agent asked one request, as a
one-step chain started through the same path as ``chainlab run``: its calls are steps a
person approves later with ``chainlab approve`` in another process, the model is the real
``openai`` client over HTTP to a scripted server, and ``chainlab show`` lists the turns
(``--json``: as data; else a line per turn under the steps, each call with its own tool)."""

from __future__ import annotations

import re
from pathlib import Path

from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .helpers import chainlab, write

SHOP = '''
import os
from chainlab import Agent, Toolbox

toolbox = Toolbox("shop")
made = []

@toolbox.tool
def lookup(order: int) -> dict:
    """Find an order."""
    return {"order": order, "status": "damaged", "total": 40}

@toolbox.tool(side_effects=True, requires_confirmation=True)
def refund(order: int, amount: int) -> dict:
    """Refund part of an order."""
    with open("refunds.txt", "a") as f:
        f.write(f"{order}:{amount}\\n")
    return {"order": order, "refunded": amount}

toolbox.add_agent(Agent("support", "You help customers.", ["lookup", "refund"],
                        model="fake-model", base_url=os.environ["SHOP_MODEL_URL"],
                        api_key="test"))
'''


def test_an_agent_runs_as_a_one_step_chain_whose_calls_are_approved_later(
        tmp_path: Path) -> None:
    write(tmp_path / "shop_tools.py", SHOP)
    db = str(tmp_path / "runs.db")
    script = [tool_calls(Call("lookup", {"order": 7}), Call("refund", {"order": 7,
                                                                     "amount": 15})),
              "Refunded 15 on order 7."]
    with FakeOpenAI(script) as server:
        url = {"SHOP_MODEL_URL": server.base_url, "PYTHONPATH": str(tmp_path)}
        r = chainlab("agent", "support", "order 7 arrived broken, refund 15", "--tools",
                     "shop_tools:toolbox", "--db", db, "--json", cwd=tmp_path, **url)
        assert r.code == 3, r.err  # suspended: the refund waits for a person
        view = r.json
        run_id = view["run_id"]
        assert view["chain"] == "agent-support"
        assert [w["step_id"] for w in view["waiting"]] == ["support/1.2"]
        assert view["steps"]["support"]["turns"][0]["calls"] == [
            {"step_id": "support/1.1", "tool": "lookup", "status": "succeeded"},
            {"step_id": "support/1.2", "tool": "refund", "status": "waiting_confirmation"}]
        assert not (tmp_path / "refunds.txt").exists()
        # approved later, in another process: the toolbox is the one the run remembers
        r = chainlab("approve", run_id, "support/1.2", "--db", db, cwd=tmp_path, **url)
        assert r.code == 0, r.err
        assert len(server.completions) == 2
    assert (tmp_path / "refunds.txt").read_text() == "7:15\n"
    r = chainlab("show", run_id, "--db", db, "--json", cwd=tmp_path)
    assert r.json["status"] == "succeeded"
    assert r.json["outputs"]["support"] == "Refunded 15 on order 7."
    assert [t["final"] for t in r.json["steps"]["support"]["turns"]] == [False, True]
    # the text view: each call's step with its own tool, and a line per model turn
    r = chainlab("show", run_id, "--db", db, cwd=tmp_path)
    assert r.code == 0, r.err
    assert re.search(r"^support/1\.2 +│ refund +│ succeeded", r.out, re.M), r.out
    assert ("support turn 1: support/1.1 lookup succeeded, support/1.2 refund succeeded\n"
            "support turn 2: final answer\n") in r.out


def test_an_unknown_agent_is_a_usage_error_naming_the_agents(tmp_path: Path) -> None:
    write(tmp_path / "shop_tools.py", SHOP)
    r = chainlab("agent", "suport", "hello", "--tools", "shop_tools:toolbox", "--db",
                 str(tmp_path / "runs.db"), cwd=tmp_path,
                 SHOP_MODEL_URL="http://127.0.0.1:9/v1", PYTHONPATH=str(tmp_path))
    assert r.code == 2, (r.out, r.err)
    assert "agent:suport" in r.err and "agent:support" in r.err, r.err
