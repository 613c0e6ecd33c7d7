"""A converted agent's run exported as a test (issue 45 item 3): ``chainlab export-test`` of
a run started with ``--from MODULE:OBJ`` (a Pydantic AI agent, its model Pydantic AI's
``OpenAIChatModel`` over the real openai client) keeps MODULE:OBJ in its fixture, and the
exported test, run by pytest in another process, replays the agent's turns from the
recording with the model's server gone: the refund is not made again."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from chainlab.agent.adhoc import agent_request
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.export import export_test
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.replay.test_export import pytest_in

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("export-test")]

MODULE = '''
import json, os, pathlib

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from chainlab import Toolbox

empty = Toolbox("empty")  # (the test's toolbox: the agent brings its tools)
support = Agent(OpenAIChatModel("fake-model", provider=OpenAIProvider(
    base_url=os.environ.get("SHOP_MODEL_URL", "http://127.0.0.1:9/v1"), api_key="test")),
    name="support", instructions="You help customers with their orders.")


@support.tool_plain
def lookup_order(order_id: int) -> dict:
    """Find an order."""
    return {"order_id": order_id, "status": "delivered"}


@support.tool_plain(requires_approval=True)
def refund(order_id: int, amount: int) -> dict:
    """Refund an order."""
    with pathlib.Path("effects.jsonl").open("a") as fh:
        fh.write(json.dumps({"refund": amount}) + "\\n")
    return {"refunded": amount}
'''


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    (tmp_path / "pa_shop.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("pa_shop", None)
    yield importlib.import_module("pa_shop")
    sys.modules.pop("pa_shop", None)


def test_a_converted_agents_run_exports_a_test_that_needs_no_model(
        shop: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = [tool_calls(Call("lookup_order", {"order_id": 7}, "c1"),
                         Call("refund", {"order_id": 7, "amount": 15}, "c2")),
              "Refunded 15 on order 7."]

    async def record() -> str:
        asked = agent_request(shop.empty, None, "order 7 arrived broken, refund 15",
                              source="pa_shop:support")
        runtime = Runtime(shop.empty, SQLiteStore(tmp_path / "runs.db"))
        run = await runtime.start(asked.chain, asked.context, meta=asked.meta)
        await run.wait()
        await run.approve("support/1.2")
        assert (await run.wait()).ok
        await runtime.aclose()
        return run.run_id

    with FakeOpenAI(script) as server:
        monkeypatch.setenv("SHOP_MODEL_URL", server.base_url)
        sys.modules.pop("pa_shop", None)  # (imported again with the server's URL)
        run_id = anyio.run(record)
        assert len(server.completions) == 2
    effects = (tmp_path / "effects.jsonl").read_text()
    with SQLiteStore(tmp_path / "runs.db") as store:
        exported = export_test(store, run_id, tmp_path / "tests" / "test_converted.py",
                               tools="pa_shop:empty", toolbox=shop.empty)
    fixture = json.loads(exported.fixture.read_text())
    assert fixture["meta"] == {"agent_from": "pa_shop:support"}
    assert [t["turn"] for t in fixture["turns"]] == [1, 2]
    monkeypatch.delenv("SHOP_MODEL_URL")
    ok = pytest_in(tmp_path, exported.test)  # its server is gone: nothing would answer
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (tmp_path / "effects.jsonl").read_text() == effects  # no refund made again
