"""The tools of the converted agents' crash test (``tests.durability.converteddriver:toolbox``
in the driver process; :func:`make` in the test): the same support agent written with
Pydantic AI and with the OpenAI Agents SDK, each converted to a chainlab agent, whose first
turn asks at once for a ``lookup_order`` (described: effect-free) and a ``charge`` (nobody
described it: side-effecting, not idempotent). The charge writes its ledger line (fsync'ed:
it survives the SIGKILL a moment later), then is slow, so the parent kills the driver while
its body runs: the effect is made, the result not yet recorded.

Configured by the environment: ``CHAINLAB_CONVERTED_LEDGER`` (the ledger file),
``CHAINLAB_CONVERTED_SDK`` (``pydantic-ai`` or ``openai-agents``), ``OPENAI_BASE_URL`` (the
scripted model, asked through each SDK's OpenAI model class)."""

from __future__ import annotations

import os
import time
from typing import Any

from chainlab import Chain, Toolbox
from tests.durability.chainlib import Ledger

SLOW_S = 3.0
CHAIN = Chain.from_dict({"name": "converted_crash", "steps": [
    {"id": "ag", "tool": "agent:support", "args": {"request": "order 7: look it up, charge 5"}}]})
READ_ONLY = {"lookup_order": {"side_effects": False}}


def make(ledger_path: str, sdk: str, model_url: str) -> Toolbox:
    ledger = Ledger(ledger_path)

    def lookup_order(order_id: int) -> dict[str, Any]:
        """Look an order up (reads only)."""
        ledger.write(tool="lookup_order", effect=False, pid=os.getpid())
        return {"order_id": order_id, "total": 40}

    def charge(order_id: int, amount: int) -> dict[str, Any]:
        """Charge the customer (not idempotent)."""
        out = {"order_id": order_id, "charged": amount}
        ledger.write(tool="charge", effect=True, pid=os.getpid(), out=out)
        time.sleep(SLOW_S)  # the effect happened; the step is not recorded yet
        return out

    tb = Toolbox("converted_crash")
    if sdk == "pydantic-ai":
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        from chainlab.integrations.pydantic_ai import from_pydantic_ai

        model = OpenAIChatModel("fake-model", provider=OpenAIProvider(base_url=model_url,
                                                                      api_key="test"))
        native = Agent(model, name="support", instructions="You are the shop's clerk.")
        native.tool_plain(lookup_order)
        native.tool_plain(charge)
        tb.add_agent(from_pydantic_ai(native, tools=READ_ONLY))
    else:
        from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
        from openai import AsyncOpenAI

        from chainlab.integrations.openai_agents import from_openai_agents

        set_tracing_disabled(True)
        native = Agent(name="support", instructions="You are the shop's clerk.",
                       model=OpenAIChatCompletionsModel("fake-model", AsyncOpenAI(
                           base_url=model_url, api_key="test", max_retries=0)),
                       tools=[function_tool(lookup_order), function_tool(charge)])
        tb.add_agent(from_openai_agents(native, tools=READ_ONLY))
    return tb


toolbox: Toolbox | None = None
if os.environ.get("CHAINLAB_CONVERTED_LEDGER"):  # the driver process
    toolbox = make(os.environ["CHAINLAB_CONVERTED_LEDGER"], os.environ["CHAINLAB_CONVERTED_SDK"],
                   os.environ["OPENAI_BASE_URL"])
