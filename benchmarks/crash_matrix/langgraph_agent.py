"""The support agent written natively with LangChain's ``create_agent`` on LangGraph
(langgraph 1.2, langchain 1.5, langchain-openai 1.8), and its driver.

    python langgraph_agent.py start|resume|timing      (see common.py)

Approval is ``HumanInTheLoopMiddleware(interrupt_on={"refund": True})`` and the state is
kept by a ``SqliteSaver`` checkpointer under one ``thread_id``, as the middleware's
docstring shows: the run ends with an interrupt whose ``action_requests`` list the calls;
``agent.invoke(Command(resume={"decisions": [{"type": "approve"}, {"type": "reject",
"message": ...}]}), config)`` continues. ``resume`` in a new process looks at
``agent.get_state(config)``: an interrupt still pending is answered the same way; a run
that stopped elsewhere (a crash) is continued as the durable-execution page says
(docs.langchain.com/oss/python/langgraph/durable-execution: "Recovering from Failures:
[...] executing the workflow with the same thread identifier by providing it with a None
as the input value"). The turn limit is ``ModelCallLimitMiddleware(thread_limit=N)``
(its default ``exit_behavior="end"``).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
from langchain.agents import create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
)
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

CONFIG: Any = {"configurable": {"thread_id": "support-1"}}


def build_agent(base_url: str, checkpointer: Any, max_turns: int) -> Any:
    """The support agent: ``refund`` needs approval."""
    model = ChatOpenAI(model=common.MODEL, base_url=base_url, api_key="test")  # type: ignore[arg-type]
    return create_agent(
        model, tools=[common.lookup_order, common.refund, common.ping],
        system_prompt=common.INSTRUCTIONS, checkpointer=checkpointer,
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True}),
                    ModelCallLimitMiddleware(thread_limit=max_turns)])


def waiting(interrupts: Any) -> list[dict[str, Any]]:
    return [{"id": f"{i.id}:{n}", "tool": req["name"], "args": req["args"], "kind": "approval"}
            for i in interrupts for n, req in enumerate(i.value["action_requests"])]


def finished(value: Any) -> common.Outcome:
    last = value["messages"][-1]
    return common.Outcome(status="completed", output=last.content)


class Driver:
    def __init__(self) -> None:
        conn = sqlite3.connect(common.state_path("checkpoints.db"), check_same_thread=False)
        self.agent = build_agent(common.base_url(), SqliteSaver(conn),
                                 common.env_int("CRASH_MAX_TURNS", 10))

    def _run(self, given: Any) -> common.Outcome:
        out = self.agent.invoke(given, CONFIG, version="v2")
        if out.interrupts:
            return common.Outcome(waiting=waiting(out.interrupts))
        return finished(out.value)

    async def start(self) -> common.Outcome:
        return self._run({"messages": [{"role": "user", "content": common.REQUEST}]})

    async def resume(self) -> common.Outcome:
        snap = self.agent.get_state(CONFIG)
        if snap.interrupts:
            return common.Outcome(waiting=waiting(snap.interrupts))
        if snap.next or snap.tasks:  # stopped by a crash: continue from the last checkpoint
            return self._run(None)
        return finished(snap.values)

    async def decide(self, decisions: list[dict[str, Any]]) -> common.Outcome:
        answers = [{"type": "approve"} if d.get("approve") else
                   {"type": "reject", "message": d["reject"]} for d in decisions]
        return self._run(Command(resume={"decisions": answers}))


@functools.cache
def timing_agent() -> Any:
    return build_agent(common.base_url(), InMemorySaver(), 1000)


async def run_once(turns: int, calls: int, rep: int) -> None:
    config = {"configurable": {"thread_id": f"timing-{turns}x{calls}-{rep}"}}
    out = timing_agent().invoke(
        {"messages": [{"role": "user", "content": common.timing_request(turns, calls, rep)}]},
        config, version="v2")
    assert out.value["messages"][-1].content == "done", out.value["messages"][-1]


def main() -> None:
    common.main(Driver, run_once, "langgraph", "langchain", "langchain-openai",
                "langgraph-checkpoint-sqlite", "openai")


if __name__ == "__main__":
    main()
