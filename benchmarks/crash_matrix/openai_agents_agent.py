"""The support agent written natively in the OpenAI Agents SDK (0.25), and its driver.

    python openai_agents_agent.py start|resume|timing      (see common.py)

The pause boundary is the SDK's documented one (docs/human_in_the_loop.md: "Tools declare
when they need approval, run results surface pending approvals as interruptions, and
`RunState` lets you serialize and resume runs after decisions are made"): at an
interruption the driver stores ``result.to_state().to_string()`` in a file; ``resume``
loads it with ``RunState.from_string(agent, text)``, the harness gives its decisions again
(``state.approve(item)`` / ``state.reject(item, rejection_message=...)``) and
``Runner.run(agent, state)`` continues. The model is reached through
``OpenAIChatCompletionsModel`` (the scripted server speaks Chat Completions).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
from agents import (
    Agent,
    MaxTurnsExceeded,
    OpenAIChatCompletionsModel,
    Runner,
    RunState,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)  # no network but the scripted model's


def build_agent(base_url: str) -> Agent[Any]:
    """The support agent: ``refund`` needs approval."""
    client = AsyncOpenAI(base_url=base_url, api_key="test")
    return Agent(name="support", instructions=common.INSTRUCTIONS,
                 model=OpenAIChatCompletionsModel(common.MODEL, client),
                 tools=[function_tool(common.lookup_order),
                        function_tool(common.refund, needs_approval=True),
                        function_tool(common.ping)])


def waiting(items: Any) -> list[dict[str, Any]]:
    return [{"id": it.call_id, "tool": it.name, "args": json.loads(it.arguments or "{}"),
             "kind": "approval"} for it in items]


class Driver:
    def __init__(self) -> None:
        self.agent = build_agent(common.base_url())
        self.path = common.state_path("runstate.json")
        self.max_turns = common.env_int("CRASH_MAX_TURNS", 10)
        self.state: Any = None

    async def _run(self, given: Any) -> common.Outcome:
        try:
            result = await Runner.run(self.agent, given, max_turns=self.max_turns)
        except MaxTurnsExceeded as exc:
            return common.Outcome(status="error", error=f"MaxTurnsExceeded: {exc}")
        if result.interruptions:
            self.state = result.to_state()
            common.write_durably(self.path, self.state.to_string())
            return common.Outcome(waiting=waiting(result.interruptions))
        return common.Outcome(status="completed", output=result.final_output)

    async def start(self) -> common.Outcome:
        return await self._run(common.REQUEST)

    async def resume(self) -> common.Outcome:
        with open(self.path) as fh:
            self.state = await RunState.from_string(self.agent, fh.read())
        return common.Outcome(waiting=waiting(self.state.get_interruptions()))

    async def decide(self, decisions: list[dict[str, Any]]) -> common.Outcome:
        items = {it.call_id: it for it in self.state.get_interruptions()}
        for d in decisions:
            if d.get("approve"):
                self.state.approve(items[d["id"]])
            else:
                self.state.reject(items[d["id"]], rejection_message=d["reject"])
        return await self._run(self.state)


@functools.cache
def timing_agent() -> Agent[Any]:
    return build_agent(common.base_url())


async def run_once(turns: int, calls: int, rep: int) -> None:
    agent = timing_agent()
    result = await Runner.run(agent, common.timing_request(turns, calls, rep),
                              max_turns=turns + 2)
    assert result.final_output == "done", result.final_output


def main() -> None:
    common.main(Driver, run_once, "openai-agents", "openai")


if __name__ == "__main__":
    main()
