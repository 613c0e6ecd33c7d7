"""``%chain agent --from MODULE:OBJ "REQUEST"`` in a real IPython shell (issue 45): a Pydantic
AI agent defined in a module is converted and run with its widget; after a kernel restart a
notebook with no toolbox at all resumes the run and approves the refund: the run keeps
MODULE:OBJ, the agent is imported again, and the model is not asked again for turn 1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Harness
from .test_agent_magic import _restart

pytestmark = pytest.mark.anyio

MODULE = '''
import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

refunds = []
support = Agent(OpenAIChatModel("fake-model", provider=OpenAIProvider(
    base_url=os.environ["MAGIC_MODEL_URL"], api_key="test")), name="support",
    instructions="You help customers.")


@support.tool_plain
def lookup_order(order_id: int) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "total": 40}


@support.tool_plain(requires_approval=True)
def refund(order_id: int, amount: int) -> dict:
    """Refund part of an order."""
    refunds.append((order_id, amount))
    return {"refunded": amount}
'''


async def test_a_pydantic_ai_agent_from_a_module_survives_a_kernel_restart(
        sh: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "magic_shop_agent.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    db = str(tmp_path / "runs.db")
    with FakeOpenAI([tool_calls(Call("lookup_order", {"order_id": 7}, "c1"),
                                Call("refund", {"order_id": 7, "amount": 15}, "c2")),
                     "Refunded 15 on order 7."]) as server:
        monkeypatch.setenv("MAGIC_MODEL_URL", server.base_url)
        # no toolbox in this notebook: the agent brings its tools
        await sh.ok(f'run = %chain agent --from magic_shop_agent:support "order 7 is broken" '
                    f'--db {db}')
        run = sh.ns["run"]
        run_id = run.run_id
        assert run.chain.name == "agent-support"
        assert any("RunWidget" in text for text in sh.displayed())
        result = await sh.ok("await run.wait()")
        assert result.waiting == {"support/1.2": "waiting_confirmation"}
        assert run.steps["support/1.1"].status == "succeeded"

        await _restart(sh)
        sys.modules.pop("magic_shop_agent")  # a new kernel imports the module afresh
        await sh.ok(f"run = %chain resume {run_id} --db {db}")
        await sh.ok(f"%chain approve {run_id} support/1.2 --db {db}")
        result = await sh.ok("await run.wait()")
        assert result.ok, result
        assert result.outputs["support"] == "Refunded 15 on order 7."
        assert len(server.completions) == 2  # turn 1 answered from the log
    assert sys.modules["magic_shop_agent"].refunds == [(7, 15)]


async def test_a_bad_from_is_a_usage_error(sh: Harness) -> None:
    msg = await sh.usage_error('%chain agent --from no_such_module_q:agent "hello"')
    assert "cannot import 'no_such_module_q'" in msg
