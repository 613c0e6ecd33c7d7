"""The support agent written natively in Pydantic AI (pydantic-ai-slim 2.78), and its driver.

    python pydantic_ai_agent.py start|resume|timing      (see common.py)

The pause boundary is the documented one (docs/deferred-tools.md: "When the model calls a
deferred tool, the agent run will end with a `DeferredToolRequests` output object [...]
Once the approvals and/or results are ready, a new agent run can then be started with the
original run's message history plus a `DeferredToolResults` object [...] which will
continue the original run where it left off"): at the end of a run with deferred calls
the driver stores ``result.all_messages()`` (``ModelMessagesTypeAdapter``) and the calls
waiting; ``resume`` loads them, the harness gives its decisions again and
``agent.run(message_history=..., deferred_tool_results=...)`` continues. The turn limit is
``UsageLimits(request_limit=N)``, with the usage so far passed on to the run that continues
(``usage=``: "Optional usage to start with, useful for resuming a conversation", the
``Agent.run`` docstring), so it bounds the whole request, not each run.

``build_agent`` is also what the converted row (``chainlab_agent.py --converted
pydantic-ai``) converts: the same object, unchanged.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
from pydantic import TypeAdapter
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    RunUsage,
    ToolDenied,
    UsageLimitExceeded,
    UsageLimits,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

USAGE = TypeAdapter(RunUsage)


def build_agent(base_url: str) -> Agent[None, Any]:
    """The support agent: ``refund`` needs approval."""
    model = OpenAIChatModel(common.MODEL,
                            provider=OpenAIProvider(base_url=base_url, api_key="test"))
    agent: Agent[None, Any] = Agent(model, instructions=common.INSTRUCTIONS,
                                    output_type=[str, DeferredToolRequests])
    agent.tool_plain(common.lookup_order)
    agent.tool_plain(requires_approval=True)(common.refund)
    agent.tool_plain(common.ping)
    return agent


class Driver:
    def __init__(self) -> None:
        self.agent = build_agent(common.base_url())
        self.path = common.state_path("messages.json")
        self.limits = UsageLimits(request_limit=common.env_int("CRASH_MAX_TURNS", 10))
        self.messages: Any = None
        self.usage: RunUsage | None = None
        self.pending: list[dict[str, Any]] = []

    async def _run(self, **kw: Any) -> common.Outcome:
        try:
            result = await self.agent.run(usage_limits=self.limits, usage=self.usage, **kw)
        except UsageLimitExceeded as exc:
            return common.Outcome(status="error", error=f"UsageLimitExceeded: {exc}")
        if isinstance(result.output, DeferredToolRequests):
            self.messages, self.usage = result.all_messages(), result.usage()
            self.pending = [{"id": p.tool_call_id, "tool": p.tool_name,
                             "args": p.args_as_dict(), "kind": "approval"}
                            for p in result.output.approvals]
            common.write_durably(self.path, json.dumps({
                "messages": ModelMessagesTypeAdapter.dump_python(self.messages, mode="json"),
                "usage": USAGE.dump_python(self.usage, mode="json"), "pending": self.pending}))
            return common.Outcome(waiting=self.pending)
        return common.Outcome(status="completed", output=result.output)

    async def start(self) -> common.Outcome:
        return await self._run(user_prompt=common.REQUEST)

    async def resume(self) -> common.Outcome:
        with open(self.path) as fh:
            stored = json.load(fh)
        self.messages = ModelMessagesTypeAdapter.validate_python(stored["messages"])
        self.usage = USAGE.validate_python(stored["usage"])
        self.pending = stored["pending"]
        return common.Outcome(waiting=self.pending)

    async def decide(self, decisions: list[dict[str, Any]]) -> common.Outcome:
        results = DeferredToolResults(approvals={
            d["id"]: True if d.get("approve") else ToolDenied(d["reject"]) for d in decisions})
        return await self._run(message_history=self.messages, deferred_tool_results=results)


@functools.cache
def timing_agent() -> Agent[None, Any]:
    return build_agent(common.base_url())


async def run_once(turns: int, calls: int, rep: int) -> None:
    result = await timing_agent().run(common.timing_request(turns, calls, rep),
                                      usage_limits=UsageLimits(request_limit=turns + 2))
    assert result.output == "done", result.output


def main() -> None:
    common.main(Driver, run_once, "pydantic-ai-slim", "openai")


if __name__ == "__main__":
    main()
